"""What runs inside a framework's environment (Python 3.8 up, numpy and that framework only): a cell's
training and evaluation (train), the certificate probe (probe), the GEMM peak (peak), the adapter
contract (base, detector), and one package per framework under frameworks/."""
