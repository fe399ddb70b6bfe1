"""What both halves import: the worker's event names and the prepared files' names (protocol), the
cell file the harness writes and the worker reads (cell_file), the model IR (ir), canonical initialisation
(init) and detection's maths (detection). Python 3.8, the standard library and numpy only: it runs inside
every framework environment as well as the harness."""
