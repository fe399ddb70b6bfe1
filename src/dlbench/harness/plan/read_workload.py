"""The child process that reads a user's workload file (user_workload.read starts it with the harness's own
Python): it runs the file, calls its model(meta) once for the meta given on stdin, checks what both declare,
and writes the answer as one JSON object on stdout: the workload's fields and the model, or {"error": ...}.

The user's code runs here rather than in the harness so that a file that loops, waits, exits or crashes stops
only this process, which the harness waits for with a time limit; whatever the file prints goes to stderr,
so that stdout holds the answer alone."""
import json
import os
import sys
from pathlib import Path


def main() -> int:
    answer_stream = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # the user's prints, Python's or C's, go to stderr
    from dlbench.harness.plan import user_workload  # after the redirection: an import may print too

    path, meta = Path(sys.argv[1]), json.load(sys.stdin)
    try:
        answer = user_workload.read_here(path, meta)
        text = json.dumps(answer)
    except user_workload.UserWorkloadError as error:
        text = json.dumps({"error": str(error)})
    except (TypeError, ValueError) as error:  # json: a value of the model or recipe that JSON cannot hold
        text = json.dumps({"error": f"{path}: the workload declares a value that is not a plain number, string, "
                                    f"list or dict ({error}); the model and recipe are plain data"})
    answer_stream.write(text)
    answer_stream.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
