"""Hostile and careless input (issue #28): suite files that would exhaust memory, time or the stack, values
that would switch a limit off, names the file system cannot hold, starting-weights files that would
allocate without bound or are not what they claim. Each is refused with exit status 2 and a message that
names the file, line, field or option, the value and what is accepted; none runs a framework."""
import os
import textwrap
import types
from pathlib import Path

import fake_dlbench
import numpy as np
import psutil
import pytest
from user_errors import error_of

from dlbench.harness import file_names
from dlbench.harness.cli import main, parser
from dlbench.harness.environments import envs
from dlbench.harness.plan import suite
from dlbench.harness.plan.suite import SuiteError
from dlbench.harness.plan.workloads import WorkloadError
from dlbench.harness.run import cell_config, record
from dlbench.harness.store import Store, StoreError
from dlbench.shared import ir

ENTRY = "workloads:\n  - {workload: cnn-mnist, dataset: digits-28, epochs: 1}\n"


@pytest.fixture(autouse=True)
def nothing_to_run(tmp_path, monkeypatch):
    """No framework environment and a results folder of the test's own: should a check let its input through,
    the command stops at the missing environment instead of training a cell."""
    monkeypatch.setenv("DLBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DLBENCH_DATA", raising=False)
    monkeypatch.chdir(tmp_path)


def write_suite(folder: Path, text: str, name: str = "suite.yaml") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def laughs(levels: int) -> str:
    """A 'billion laughs' description: each level's alias list repeats the one before nine times, so the text
    grows as 9 ** levels (9 levels: 387 million strings, 2.35 GB reached in 50 s before aliases were refused).
    Tests use few levels, so that a loader that lets it through fails the test instead of the machine."""
    names = "abcdefghij"
    lines = [f'  {names[0]}: &{names[0]} ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"  {names[i]}: &{names[i]} [{', '.join(['*' + names[i - 1]] * 9)}]" for i in range(1, levels)]
    return "description:\n" + "\n".join(lines) + "\n"


# ---- suite files: what the YAML loader refuses ------------------------------------------------

def test_an_alias_bomb_is_refused_at_its_first_anchor(capsys, tmp_path):
    path = write_suite(tmp_path, "name: bomb\nframeworks: [pytorch]\n" + laughs(5) + ENTRY)
    assert error_of(capsys, ["run", str(path)]) == (
        f"{path}:4: YAML anchor &a: a suite file accepts no anchors (&name) or aliases (*name); write each value out")


@pytest.mark.parametrize(("text", "line", "what"), [
    ("name: &n mine\nframeworks: [pytorch]\n" + ENTRY, 1, "anchor &n"),
    # an alias to an anchor the file never defines is refused as an alias, before PyYAML's own complaint
    ("name: mine\nframeworks: *fw\n" + ENTRY, 2, "alias *fw"),
    ("name: mine\nframeworks: [pytorch]\nworkloads:\n  - {workload: cnn-mnist, dataset: digits-28}\n"
     "  - {<<: *e, epochs: 2}\n", 5, "alias *e"),
])
def test_anchors_and_aliases_are_refused_naming_the_line(tmp_path, text, line, what):
    with pytest.raises(SuiteError) as caught:
        suite.load(str(write_suite(tmp_path, text)))
    assert str(caught.value) == (f"{tmp_path / 'suite.yaml'}:{line}: YAML {what}: a suite file accepts no anchors "
                                 "(&name) or aliases (*name); write each value out")


@pytest.mark.parametrize(("text", "message"), [
    ("name: mine\nframeworks: [pytorch]\nrepeat: 1\nrepeat: 3\n" + ENTRY,
     "4: field 'repeat' appears twice (lines 3 and 4); give each field once"),
    ("name: mine\nframeworks: [pytorch]\nworkloads:\n  - workload: cnn-mnist\n    dataset: digits-28\n"
     "    epochs: 1\n    epochs: 5\n", "7: field 'epochs' appears twice (lines 6 and 7); give each field once"),
])
def test_a_field_given_twice_is_refused_naming_both_lines(capsys, tmp_path, text, message):
    path = write_suite(tmp_path, text)
    assert error_of(capsys, ["run", str(path)]) == f"{path}:{message}"


@pytest.mark.parametrize(("value", "message"), [
    ("2001-13-45", "cannot read '2001-13-45' as timestamp: month must be in 1..12"),
    ('!!int "abc"', "cannot read 'abc' as int: invalid literal for int() with base 10: 'abc'"),
    ("!!timestamp 4", "cannot read '4' as timestamp"),  # AttributeError inside PyYAML
    ('!!float ""', "cannot read '' as float"),  # IndexError inside PyYAML
    ("1" + "0" * 5000, "cannot read '100000000000000000000000000000000000000... (5001 characters) as int: Exceeds "
                       "the limit (4300 digits) for integer string conversion: value has 5001 digits"),
])
def test_a_value_yaml_cannot_construct_is_refused_at_its_line(capsys, tmp_path, value, message):
    # each raised its constructor's ValueError, a traceback
    path = write_suite(tmp_path, f"name: v\nframeworks: [pytorch]\ndescription: {value}\n" + ENTRY)
    assert error_of(capsys, ["run", str(path)]) == f"{path}:3: {message}"


def test_deep_nesting_is_refused_before_it_overflows_the_stack(capsys, tmp_path):
    # 400 KB, within the size limit: PyYAML's composer recursed once per bracket (RecursionError)
    path = write_suite(tmp_path, "name: deep\nframeworks: [pytorch]\ndescription: " + "[" * 200_000
                       + "]" * 200_000 + "\n" + ENTRY)
    assert error_of(capsys, ["run", str(path)]) == (
        f"{path}:3: nested deeper than 20 levels; a suite nests four (suite, workloads, entry, value)")


def test_a_suite_file_over_1_mib_is_refused_and_one_within_is_read(capsys, tmp_path):
    head = "name: big\nframeworks: [pytorch]\n"
    padding = suite.MAX_SUITE_BYTES - len(head) - len(ENTRY)
    comment = ("#" * 99 + "\n") * (padding // 100) + "#" * (padding % 100 - 1) + "\n"
    within = write_suite(tmp_path, head + comment + ENTRY, "within.yaml")
    assert within.stat().st_size == suite.MAX_SUITE_BYTES
    assert suite.load(str(within)).name == "big"
    over = write_suite(tmp_path, head + comment + "#\n" + ENTRY, "over.yaml")
    assert error_of(capsys, ["run", str(over)]) == (
        f"{over}: larger than 1 MiB (1,048,576 bytes), the most a suite file may hold")


def test_a_suite_file_that_is_not_utf8_is_refused_naming_the_byte(capsys, tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(("name: mine\ndescription: caf\xe9\nframeworks: [pytorch]\n" + ENTRY).encode("latin-1"))
    assert error_of(capsys, ["run", str(path)]) == (
        f"{path}:2: not UTF-8 text (byte 0xe9 at offset 27); a suite file is YAML in UTF-8")


def test_a_suite_path_that_is_a_folder_says_so(capsys, tmp_path):
    folder = tmp_path / "suites.yaml"
    folder.mkdir()
    assert error_of(capsys, ["run", str(folder)]) == (
        f"suite file {folder} is a folder; give the path of a suite file (.yaml) in it")
    assert error_of(capsys, ["run", str(tmp_path)]) == (
        f"suite file {tmp_path} is a folder; give the path of a suite file (.yaml) in it")


# ---- suite files: numbers that would switch a limit off, names too long --------------------------

@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", "1e999", "0", "-5", "1" + "0" * 400, "'60'"])
def test_a_timeout_that_is_not_a_finite_positive_number_is_refused(capsys, tmp_path, value):
    # a NaN deadline is never reached and an infinite one never comes: either would switch the timeout off
    path = write_suite(tmp_path, f"name: t\nframeworks: [pytorch]\ntimeout_s: {value}\n" + ENTRY)
    message = error_of(capsys, ["run", str(path)])
    assert message.startswith(f"{path}:3: field 'timeout_s': expected a finite number of seconds > 0, got ")


def test_a_finite_timeout_is_read_as_seconds(tmp_path):
    path = write_suite(tmp_path, "name: t\nframeworks: [pytorch]\ntimeout_s: 0.5\n" + ENTRY)
    assert suite.load(str(path)).timeout_s == 0.5


@pytest.mark.parametrize(("field", "value", "accepted"), [
    ("seed", 2**32, "an integer from 0 to 4294967295"),  # numpy's RandomState refused it in every worker
    ("seed", -1, "an integer from 0 to 4294967295"),
    ("repeat", 10_001, "an integer from 1 to 10000"),
])
def test_a_seed_or_repeat_out_of_range_is_refused(capsys, tmp_path, field, value, accepted):
    path = write_suite(tmp_path, f"name: s\nframeworks: [pytorch]\n{field}: {value}\n" + ENTRY)
    assert error_of(capsys, ["run", str(path)]) == f"{path}:3: field '{field}': expected {accepted}, got {value}"


def test_a_plan_over_10000_cells_or_beyond_the_last_seed_is_refused_before_it_is_built(tmp_path):
    path = write_suite(tmp_path, f"name: s\nframeworks: [pytorch]\nseed: {suite.MAX_SEED}\nrepeat: 2\n" + ENTRY)
    with pytest.raises(SuiteError, match=r"^seed 4294967295 and 2 repetitions: the last repetition would draw "
                                         r"from seed 4294967296; seed \+ repetitions - 1 may be at most 4294967295$"):
        suite.plan(suite.load(str(path)))
    # --repeat 100000000 built a list of every cell first and ran out of memory (MemoryError); 556 repetitions
    # of the quick suite's 18 cells are 10,008
    with pytest.raises(SuiteError, match=r"^the plan would hold 10,008 cells \(556 repetitions x 2 workload entries "
                                         r"and axis values x 9 frameworks\); a plan holds at most 10,000: ask for "
                                         r"fewer repetitions \(repeat, --repeat\), workloads \(-w\), frameworks "
                                         r"\(-f\) or values of the entries' batch_size and threads$"):
        suite.plan(suite.load("quick"), repeat=556)
    # a sweep's axes count: 2 batch sizes x 3 threads x 1,667 repetitions are 10,002 cells
    sweep = suite.load(str(write_suite(tmp_path, "name: s\nframeworks: [pytorch]\nworkloads:\n  - {workload: "
                                                 "cnn-mnist, dataset: digits-28, batch_size: [32, 64], "
                                                 "threads: [1, 2, 3]}\n")))
    with pytest.raises(SuiteError, match=r"^the plan would hold 10,002 cells \(1,667 repetitions x 6 workload "):
        suite.plan(sweep, repeat=1667)
    assert len(suite.plan(sweep, repeat=1666)) == 9_996
    assert len(suite.plan(suite.load("quick"), repeat=556, frameworks=["pytorch"])) == 556 * 2
    plain = suite.load(str(write_suite(tmp_path, "name: s\nframeworks: [pytorch]\n" + ENTRY)))
    assert len(suite.plan(plain, repeat=10_000)) == 10_000


def test_a_suite_name_over_100_characters_is_refused(capsys, tmp_path):
    path = write_suite(tmp_path, f"name: {'n' * 400}\nframeworks: [pytorch]\n" + ENTRY)
    assert error_of(capsys, ["run", str(path)]) == (
        f"{path}:1: field 'name': 'nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn... (400 characters) is longer than 100 "
        "characters, the most a suite's name may have")
    path = write_suite(tmp_path, f"name: {'n' * 100}\nframeworks: [pytorch]\n" + ENTRY)
    assert suite.load(str(path)).name == "n" * 100


def test_a_suite_path_or_weights_path_the_file_system_cannot_name_is_refused(capsys, tmp_path):
    long_suite = tmp_path / ("s" * 300 + ".yaml")
    assert error_of(capsys, ["run", str(long_suite)]) == (
        f"suite file {file_names.shortened(str(long_suite))}: the name 'sssssssssssssssssssssssssssssssssssssss... "
        "(305 characters) in it is 305 bytes long; this file system allows 255 bytes in a name")
    path = write_suite(tmp_path, "name: w\nframeworks: [pytorch]\nworkloads:\n  - {workload: cnn-mnist, "
                                 f"dataset: digits-28, weights: {'w' * 300}.npz}}\n")
    assert error_of(capsys, ["run", str(path)]) == (
        f"{path}:4: field 'weights': a path the file system cannot hold: the name 'wwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwww"
        "wwww... (304 characters) in it is 304 bytes long; this file system allows 255 bytes in a name")


# ---- the command line's numbers ------------------------------------------------------------------

@pytest.mark.parametrize(("argv", "option", "accepted"), [
    (["run", "quick"], "--timeout", "a finite number > 0"),  # a NaN timeout never fired
    (["run", "quick"], "--memory-limit-mb", "a finite number > 0"),  # a NaN memory limit never killed
    (["env", "prune", "--dry-run"], "--older-than", "a finite number >= 0"),
])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400", "-1"])
def test_a_number_that_would_switch_a_limit_off_is_refused_naming_the_option(capsys, argv, option, accepted, value):
    with pytest.raises(SystemExit) as exited:
        main([*argv, f"{option}={value}"])  # with '=': argparse takes a lone -inf for an option
    assert exited.value.code == 2
    assert f"argument {option}: expected {accepted}, got {value}" in capsys.readouterr().err


@pytest.mark.parametrize(("option", "value"), [("--timeout", "0"), ("--memory-limit-mb", "0")])
def test_a_zero_limit_is_refused(capsys, option, value):
    with pytest.raises(SystemExit) as exited:
        main(["run", "quick", option, value])
    assert exited.value.code == 2
    assert f"argument {option}: expected a finite number > 0, got 0" in capsys.readouterr().err


def test_finite_limits_and_zero_days_are_accepted(capsys):
    args = parser().parse_args(["run", "--timeout", "0.5", "--memory-limit-mb", "1e5"])
    assert (args.timeout, args.memory_limit_mb) == (0.5, 1e5)
    assert main(["env", "prune", "--dry-run", "--older-than", "0"]) == 0  # every environment, none built here


# ---- the command line's paths and framework names --------------------------------------------------

LONG = "r" * 300
TOO_LONG = (f"the name {LONG[:39]!r}"[:-1] + "... (300 characters) in it is 300 bytes long; this file system "
            "allows 255 bytes in a name")


@pytest.mark.parametrize(("argv", "option"), [
    (["run", "quick", "--results", "{long}"], "--results"),  # the store's folder: OSError from mkdir
    (["results", "--results", "{long}"], "--results"),
    (["report", "--results", "{long}"], "--results"),
    (["certify", "--show", "--results", "{long}"], "--results"),
    (["compare", "--results", "{long}", "--baseline", "{tmp}"], "--results"),
    (["compare", "--results", "{tmp}", "--baseline", "{long}"], "--baseline"),
    (["estimate", "quick", "--results", "{long}"], "--results"),
    (["run", "quick", "--data-dir", "{long}"], "--data-dir"),  # OSError while preparing the data
    (["report", "--results", "{tmp}", "--output", "{long}"], "--output"),  # OSError after the report was built
])
def test_a_path_the_file_system_cannot_name_is_refused_before_anything_is_written(capsys, tmp_path, argv, option):
    long = tmp_path / LONG
    message = error_of(capsys, [arg.format(long=long, tmp=tmp_path) for arg in argv])
    assert message == f"{option} {file_names.shortened(str(long))}: {TOO_LONG}"
    assert not list(tmp_path.iterdir())  # no store, no results or data folder, no report


@pytest.mark.parametrize("variable", ["DLBENCH_HOME", "DLBENCH_DATA", "DLBENCH_CERTIFICATES"])
def test_a_variable_naming_a_path_the_file_system_cannot_hold_is_refused(capsys, tmp_path, monkeypatch, variable):
    monkeypatch.setenv(variable, str(tmp_path / LONG))
    assert error_of(capsys, ["env", "list"]) == f"{variable} {file_names.shortened(str(tmp_path / LONG))}: {TOO_LONG}"


SPEC = "jax@0.6.2" + ".0" * 200  # PEP 440 reads it as 0.6.2, a supported version: it became a folder's name
SPEC_REFUSED = ("framework 'jax@0.6.2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0... (409 characters): longer than 100 characters, "
                "the most a framework name@version may have; known: ")


@pytest.mark.parametrize("argv", [["run", "quick", "-f", SPEC], ["env", "create", SPEC, "--dry-run"],
                                  ["certify", "-f", SPEC, "-w", "cnn-mnist"]])
def test_a_framework_version_too_long_for_a_folder_name_is_refused(capsys, argv):
    assert error_of(capsys, argv).startswith(SPEC_REFUSED)


def test_a_suite_framework_too_long_for_a_folder_name_is_refused_at_its_line(capsys, tmp_path):
    path = write_suite(tmp_path, f"name: v\nframeworks: [{SPEC}]\n" + ENTRY)
    assert error_of(capsys, ["run", str(path)]).startswith(f"{path}:2: field 'frameworks': {SPEC_REFUSED}")


def test_a_weights_path_holding_a_nul_character_is_refused(capsys, tmp_path):
    path = write_suite(tmp_path, "name: w\nframeworks: [pytorch]\nworkloads:\n  - {workload: cnn-mnist, "
                                 'dataset: digits-28, weights: "a\\0b.npz"}\n')  # a traceback: embedded null byte
    assert error_of(capsys, ["run", str(path)]) == (
        f"{path}:4: field 'weights': a path the file system cannot hold: it holds a NUL character, which no file "
        "name may hold")


# ---- integers a cell is built from, and the store's last guard (issue #40) -------------------------------

@pytest.fixture
def two_cores(monkeypatch):
    """A 2-core machine, whatever this one has: threads are bounded at 4 per logical core, 8 here."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)


THREADS_ACCEPTED = "an integer from 1 to 8 (4 per logical core, and this machine has 2)"


@pytest.mark.parametrize(("value", "shown"), [
    (512, "512"),  # started 1,024 worker threads on a 2-core machine
    (10**20, "100000000000000000000"),  # crashed save_peak (OverflowError), after the peak was measured
    (10**250, "1000000000000000000000000000000000000000... (251 characters)"),  # a folder name too long
])
def test_threads_beyond_4_per_core_are_refused_before_any_folder(capsys, tmp_path, two_cores, value, shown):
    entry = f"workloads:\n  - {{workload: cnn-mnist, dataset: digits-28, epochs: 1, threads: {value}}}\n"
    path = write_suite(tmp_path, "name: t\nframeworks: [pytorch]\n" + entry)
    assert error_of(capsys, ["run", str(path)]) == (
        f"{path}:4: field 'threads': entry cnn-mnist on digits-28: value {shown} is not accepted; expected "
        f"{THREADS_ACCEPTED}, 'all', or a non-empty list of distinct ones (all: every core of the machine)")
    path = write_suite(tmp_path, f"name: t\nframeworks: [pytorch]\nthreads: {value}\n" + ENTRY)
    assert error_of(capsys, ["run", str(path)]) == (
        f"{path}:3: field 'threads': expected {THREADS_ACCEPTED}, got {shown}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["suite.yaml"]  # no results folder, no run folder


def test_threads_up_to_4_per_core_are_planned(tmp_path, two_cores):
    path = write_suite(tmp_path, "name: t\nframeworks: [pytorch]\nthreads: 8\nworkloads:\n  - {workload: "
                                 "cnn-mnist, dataset: digits-28, threads: [1, 8, all]}\n")
    assert sorted(cell.threads for cell in suite.plan(suite.load(str(path)))) == [1, 2, 8]
    assert parser().parse_args(["run", "--threads", "8"]).threads == 8


@pytest.mark.parametrize("command", ["run", "estimate"])
@pytest.mark.parametrize(("option", "value", "accepted"), [
    ("--threads", "512", THREADS_ACCEPTED),
    ("--threads", str(10**20), THREADS_ACCEPTED),
    ("--epochs", "1" + "0" * 400, "an integer from 1 to 100000"),  # estimate: OverflowError, a traceback
    ("--epochs", "100001", "an integer from 1 to 100000"),
    ("--repeat", "10001", "an integer from 1 to 10000"),
    ("--epochs", "ten", "an integer from 1 to 100000"),
])
def test_an_integer_option_out_of_range_exits_2_naming_it(capsys, two_cores, command, option, value, accepted):
    with pytest.raises(SystemExit) as exited:
        main([command, "quick", option, value])
    assert exited.value.code == 2
    shown = value if len(value) <= file_names.SHOWN else file_names.shortened(value)
    assert f"error: argument {option}: expected {accepted}, got {shown}\n" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "accepted"), [
    (["estimate", "quick", "--nodes", "10001"], "--nodes: expected an integer from 1 to 10000"),
    (["run", "quick", "--executor", "ray", "--retries", "101"], "--retries: expected an integer from 0 to 100"),
    (["env", "create", "pytorch", "--from-run", str(2**63)], "--from-run: expected an integer from 1 to "
                                                              "9223372036854775807"),
])
def test_the_other_integer_options_are_bounded(capsys, argv, accepted):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert f"error: argument {accepted}, got {argv[-1]}\n" in capsys.readouterr().err


@pytest.mark.parametrize(("field", "value", "accepted"), [
    ("epochs", 100_001, "an integer from 1 to 100000"),
    ("epochs", 10**30, "an integer from 1 to 100000"),
])
def test_an_entry_integer_beyond_its_bound_is_refused(capsys, tmp_path, field, value, accepted):
    path = write_suite(tmp_path, "name: e\nframeworks: [pytorch]\nworkloads:\n  - {workload: cnn-mnist, "
                                 f"dataset: digits-28, {field}: {value}}}\n")
    assert error_of(capsys, ["run", str(path)]) == f"{path}:4: field '{field}': expected {accepted}, got {value}"


def test_a_batch_size_beyond_its_bound_is_refused(capsys, tmp_path):
    path = write_suite(tmp_path, "name: b\nframeworks: [pytorch]\nworkloads:\n  - {workload: cnn-mnist, "
                                 f"dataset: digits-28, batch_size: [32, {2**20 + 1}]}}\n")
    assert error_of(capsys, ["run", str(path)]) == (
        f"{path}:4: field 'batch_size': entry cnn-mnist on digits-28: value 1048577 is not accepted; expected an "
        "integer from 1 to 1048576, or a non-empty list of distinct ones")
    path = write_suite(tmp_path, "name: b\nframeworks: [pytorch]\nworkloads:\n  - {workload: cnn-mnist, "
                                 f"dataset: digits-28, batch_size: {2**20}}}\n")
    assert [cell.batch_size for cell in suite.plan(suite.load(str(path)))] == [2**20]


BIG_MODEL = '''from dlbench import ir, user


def model(meta):
    # 36 inputs x 2.5e17 units + 2.5e17 biases + 2.5e17 x 3 + 3: 10,000,000,000,000,000,003 parameters
    return ir.model(meta["input_shape"], "float32", [
        ir.flatten(), ir.dense(250_000_000_000_000_000), ir.dense(meta["num_classes"])])


WORKLOAD = user.Workload(name="huge", description="a dense layer of 2.5e17 units", model=model,
                         optimizer={"name": "sgd", "lr": 0.1, "momentum": 0.0, "nesterov": False,
                                    "weight_decay": 0.0},
                         loss="softmax_cross_entropy", batch_size=8, epochs=1, metric="accuracy", target=0.5)
'''


@pytest.fixture
def fake_framework(tmp_path, monkeypatch, user_registries):
    """The tests' fake framework, its environment built under DLBENCH_HOME; the user's workloads and datasets
    registered by the test are forgotten after it."""
    monkeypatch.setitem(envs.RECIPES, "fakefw", fake_dlbench.RECIPE)
    fake_dlbench.make_environment(tmp_path / "home")


def test_a_model_of_10_to_the_19_parameters_is_refused_before_any_cell(capsys, tmp_path, fake_framework):
    # it trained, then save_run raised OverflowError: the run was not stored and its folder was orphaned
    (tmp_path / "huge.py").write_text(BIG_MODEL)
    rng = np.random.RandomState(0)
    np.savez(tmp_path / "data.npz", x_train=rng.randint(0, 256, (24, 6, 6, 1)).astype(np.uint8),
             y_train=rng.randint(0, 3, 24), x_test=rng.randint(0, 256, (8, 6, 6, 1)).astype(np.uint8),
             y_test=rng.randint(0, 3, 8))
    path = write_suite(tmp_path, "name: huge\nframeworks: [fakefw]\nthreads: 1\nworkloads:\n  - workload: huge.py\n"
                                 "    dataset: {path: data.npz, task: classification}\n")
    message = error_of(capsys, ["run", str(path), "--results", str(tmp_path / "R")])
    assert message == (
        f"workload huge (file {tmp_path / 'huge.py'}) on data: its model holds 10,000,000,000,000,000,003 "
        f"parameters, 40,000,000,000,000,000,012 bytes as float32; this machine's memory is "
        f"{psutil.virtual_memory().total:,} bytes, and a model's parameters must fit it")
    assert [p.name for p in (tmp_path / "R").iterdir()] == ["dlbench.lock"]  # no store, no run folder


def test_a_model_is_refused_exactly_when_its_float32_parameters_exceed_memory(monkeypatch, tmp_path):
    [cell] = suite.plan(suite.load(str(write_suite(tmp_path, "name: m\nframeworks: [pytorch]\n" + ENTRY))))
    model = ir.model([4], "float32", [ir.dense(2)])  # 4 x 2 weights + 2 biases: 10 parameters, 40 bytes
    monkeypatch.setattr(psutil, "virtual_memory", lambda: types.SimpleNamespace(total=40))
    cell_config.check_model_fits(cell, model)
    monkeypatch.setattr(psutil, "virtual_memory", lambda: types.SimpleNamespace(total=39))
    with pytest.raises(WorkloadError, match=r"^workload cnn-mnist on digits-28: its model holds 10 parameters, 40 "
                                            r"bytes as float32; this machine's memory is 39 bytes"):
        cell_config.check_model_fits(cell, model)


def test_the_store_refuses_an_integer_sqlite_cannot_hold_and_writes_nothing(tmp_path):
    run = {"cell_hash": "h", "suite": "s", "framework": "pytorch", "workload": "cnn-mnist", "status": "ok",
           "repetition": 1}
    epoch = {"epoch": 0, "train_time_s": 1.0}
    with Store(tmp_path / "dlbench.sqlite") as store:
        with pytest.raises(StoreError, match=r"^run not saved: field 'params' holds 9223372036854775808, beyond the "
                                             r"store's integers \(-9223372036854775808 to 9223372036854775807\); "
                                             r"nothing of it was written$"):
            store.save_run(dict(run, params=2**63), [epoch], [])
        with pytest.raises(StoreError, match=r"^epoch not saved: field 'epoch' holds -9223372036854775809, "):
            store.save_run(run, [epoch, {"epoch": -(2**63) - 1}], [])  # the run's row is valid, its epoch not
        with pytest.raises(StoreError, match=r"^peak not saved: field 'threads' holds 100000000000000000000, "):
            store.save_peak({"framework": "pytorch", "threads": 10**20, "device": "cpu", "gflops": 1.0})
        assert (store.runs(), store.peaks()) == ([], [])
        assert store._conn.execute("SELECT count(*) FROM epochs").fetchone() == (0,)
        # the largest integer it holds goes in and comes back; a JSON column's integers are text, any size
        store.save_run(dict(run, params=2**63 - 1, config={"huge": 10**30}), [epoch], [])
        [stored] = store.runs()
        assert (stored["params"], stored["config"]) == (2**63 - 1, {"huge": 10**30})


@pytest.mark.parametrize(("field", "value", "accepted"), [("epochs", 10**30, "an integer from 1 to 100000"),
                                                          ("batch_size", 2**20 + 1, "an integer from 1 to 1048576")])
def test_a_workload_file_recipe_beyond_its_bound_is_refused(tmp_path, fake_framework, field, value, accepted):
    declared = {"epochs": "epochs=1", "batch_size": "batch_size=8"}[field]
    (tmp_path / "huge.py").write_text(BIG_MODEL.replace(declared, f"{field}={value}"))
    np.savez(tmp_path / "data.npz", x_train=np.zeros((4, 6, 6, 1), np.uint8), y_train=np.arange(4) % 3,
             x_test=np.zeros((2, 6, 6, 1), np.uint8), y_test=np.arange(2))
    path = write_suite(tmp_path, "name: huge\nframeworks: [fakefw]\nworkloads:\n  - workload: huge.py\n"
                                 "    dataset: {path: data.npz, task: classification}\n")
    with pytest.raises(SuiteError) as refused:
        suite.load(str(path))
    assert str(refused.value) == (f"{path}:4: field 'workload': {tmp_path / 'huge.py'}: {field} {value}; expected "
                                  f"{accepted}")


def test_a_run_the_store_cannot_hold_stops_the_plan_naming_its_kept_folder(capsys, tmp_path, monkeypatch,
                                                                            digits_dir):
    """The store's last guard, through a real run of the fake framework: were a count beyond 64 bits to pass the
    plan's bounds, the plan stops with one message (it raised OverflowError inside the write), nothing of the
    run is stored, and its folder, with the worker's events and output, is kept and named."""
    monkeypatch.setitem(envs.RECIPES, "fakefw", fake_dlbench.RECIPE)
    path = fake_dlbench.suite_file(tmp_path, monkeypatch)
    monkeypatch.setattr(cell_config, "check_model_fits", lambda cell, model: None)  # the bound, let through here
    monkeypatch.setattr(record.ir, "count_params", lambda model: 2**63)
    results = tmp_path / "results"
    message = error_of(capsys, ["run", str(path), "--results", str(results), "--data-dir", str(digits_dir),
                                "--plain", "--no-live-report"])
    kept = message.rsplit("; the run's folder ", 1)[-1].removesuffix(" is kept")
    assert message == (
        "run not saved: field 'params' holds 9223372036854775808, beyond the store's integers "
        "(-9223372036854775808 to 9223372036854775807); nothing of it was written: fakefw cnn-mnist on digits-28, "
        f"repetition 1; the run's folder {kept} is kept")
    assert Path(kept).parent.parent == results and (Path(kept) / "events.jsonl").is_file()
    with Store(results / "dlbench.sqlite", for_reading=True) as store:
        assert store.runs() == []
