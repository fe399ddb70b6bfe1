"""Equivalence certificates: a framework trains the same model as the reference, or dlbench says so.
probes.py runs the probes and judges them, optimizer.py certifies each optimiser on its own, power.py
shows what a certificate can see, machine_store.py keeps the machine's certificates, and
certified_model.py says what a certificate is of."""
