"""What every verb shares: help with defaults and examples, --version, tables that fit, the cache."""

import re

import jax
import pytest

from weakspots import __version__
from weakspots.cli import SUMMARIES, VERBS, build_parser, common, main
from weakspots.cli.compare import with_intervals

OWNED = ("train", "ablate", "compare", "sweep", "plot", "bench")  # verbs of cli/{verb}.py here


def _verbs():
    return build_parser()._subparsers._group_actions[0].choices


@pytest.mark.parametrize("verb", OWNED)
def test_help_has_an_example_and_every_flag_a_text_and_its_default(verb):
    parser = _verbs()[verb]
    text = parser.format_help()
    assert "examples:\n  weakspots " + verb in text
    for action in parser._actions:
        if action.option_strings and action.dest != "help":
            assert action.help, f"{verb} {action.option_strings[0]} has no help text"
    if verb in ("train", "ablate", "compare"):
        assert re.search(r"--stride STRIDE\s+tokens per chunk s \(default: 8\)", text)
        assert "(default: None)" not in text and "(default: False)" not in text


def _parsers(parser, prog="weakspots"):
    """Every verb's parser and every `lm` sub-verb's, by the name it answers as."""
    for name, sub in parser._subparsers._group_actions[0].choices.items():
        yield f"{prog} {name}", sub
        if sub._subparsers is not None:
            yield from _parsers(sub, f"{prog} {name}")


def test_every_verb_shows_defaults_as_typed_and_none_empty():
    for verb, parser in _parsers(build_parser()):
        shown = [
            a
            for a in parser._actions
            if a.option_strings
            and a.default not in (None, False, "", [], (), "==SUPPRESS==")
            and a.help
        ]
        text = " ".join(parser.format_help().split())  # help text wraps
        for action in shown:
            default = action.default
            if isinstance(default, list | tuple):
                default = " ".join(map(str, default))
            assert f"(default: {default})" in text, (verb, action.dest)
        assert "(default: )" not in text, verb
        assert not re.search(r"\(default: [(\[]", text), verb  # no Python repr of a list


def test_unknown_flag_names_the_verb_and_the_nearest_flag(capsys):
    for argv, prog, near in (
        (["train", "--stepps", "100"], "weakspots train", "--steps"),
        (["lm", "train", "--stepps", "3"], "weakspots lm train", "--steps"),
        (["flow", "--chunk", "3", "--t-1", "4"], "weakspots flow", "--t1"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"{prog}: error: unrecognized arguments"), err
        assert f"did you mean {near}?" in err and len(err.splitlines()) == 1, err


def test_a_mistyped_verb_gets_the_nearest_one(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["trian", "--steps", "3"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("weakspots: error: argument verb: invalid choice: 'trian'")
    assert err.strip().endswith("(did you mean train?)")


def test_every_verb_and_sub_verb_answers_in_its_own_name(capsys):
    for verb, parser in _parsers(build_parser()):
        if parser._subparsers is not None:
            continue  # `weakspots lm` alone: its sub-verbs answer
        words = verb.split()[1:]
        with pytest.raises(SystemExit) as exit_:
            main([*words, "--no-such-flag"])
        assert exit_.value.code == 2
        assert capsys.readouterr().err.startswith(f"{verb}: error: "), verb


def test_help_lists_every_verb_without_importing_one():
    # `weakspots --help` imports no verb module (each imports jax, seconds): a fresh process
    # that asks for the top-level help has not imported jax, and lists each verb's summary.
    import subprocess
    import sys

    code = (
        "import sys\nfrom weakspots.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print('JAX' if 'jax' in sys.modules else 'NOJAX')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("NOJAX"), out.stdout[-200:]
    text = " ".join(out.stdout.split())
    for verb in VERBS:
        assert " ".join(SUMMARIES[verb].split()) in text, verb


def test_summaries_are_the_verbs_own_help():
    full = build_parser()._subparsers._group_actions[0]
    assert {a.dest: a.help for a in full._choices_actions} == {
        verb: SUMMARIES[verb] for verb in full.choices
    }


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"weakspots {__version__}"


def test_wide_table_wraps_text_and_keeps_numbers():
    config = "s=8 N=64 d=64 H=1 gain=16 softmax_pool mse sgd lr=2 steps=600 batch=256 seeds 0..7"
    rows = [["growth_rate_reduced_flow", config, 0.123456, 0.1234, "pass"]] * 2
    text = common.table(["prediction", "config", "predicted", "ode", "pass"], rows, width=80)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert len(lines) > 4  # the config wrapped over several lines per row
    assert text.count("0.123") == 4 and "0.123456" not in text  # numbers whole, formatted
    # the config column's cells, read back line by line, hold the config twice, word for word
    start = lines[0].index("config")
    width = len(lines[1][start:].split()[0])
    cells = " ".join(line[start : start + width].strip() for line in lines[2:])
    assert cells.split() == (config + " " + config).split()


def test_narrow_table_is_unchanged():
    text = common.table(["a", "name"], [[1.0, "x"], [2.5, "yy"]], width=100)
    assert text.splitlines() == ["    a  name", "-----  ----", "1.000  x", "2.500  yy"]


def test_cache_folder_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(common.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert common.compilation_cache_dir() == tmp_path / "weakspots" / "jax"
    monkeypatch.setenv(common.CACHE_ENV, str(tmp_path / "mine"))
    assert common.compilation_cache_dir() == tmp_path / "mine"
    for off in ("off", "0", ""):
        monkeypatch.setenv(common.CACHE_ENV, off)
        assert common.compilation_cache_dir() is None


def test_enable_cache_keeps_a_configured_folder(monkeypatch, tmp_path):
    before = jax.config.jax_compilation_cache_dir
    min_time = jax.config.jax_persistent_cache_min_compile_time_secs
    try:
        jax.config.update("jax_compilation_cache_dir", None)
        monkeypatch.setenv(common.CACHE_ENV, "off")
        assert common.enable_compilation_cache() is None
        assert jax.config.jax_compilation_cache_dir is None
        monkeypatch.setenv(common.CACHE_ENV, str(tmp_path))
        assert common.enable_compilation_cache() == str(tmp_path)
        assert jax.config.jax_compilation_cache_dir == str(tmp_path)
        jax.config.update("jax_compilation_cache_dir", "/elsewhere")  # JAX_COMPILATION_CACHE_DIR
        assert common.enable_compilation_cache() == "/elsewhere"
    finally:
        jax.config.update("jax_compilation_cache_dir", before)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", min_time)


def test_compare_intervals_stay_in_range():
    # per-seed values whose mean +- 1.96 sd interval was [0.273, 1.012] (issue report)
    values = [0.38, 0.98, 0.5]
    row = {
        "mean_accuracy": {"mean": 0.62, "ci": [0.273, 1.012], "values": values},
        "delta_max": {"mean": 0.5, "ci": [-0.2, 1.2], "values": [0.02, 0.97, 0.5]},
        "predicted_mean_accuracy": {"mean": 0.62, "ci": [0.2, 1.1], "values": values},
        "psc": {"mean": 0.1, "ci": [-0.1, 0.3], "values": [0.0, 0.3, 0.0]},
        "phase_accuracy": [0.5, 0.6],
    }
    out = with_intervals(row, samples=8 * 2048)
    for key in ("mean_accuracy", "delta_max", "predicted_mean_accuracy"):
        lo, hi = out[key]["ci"]
        assert 0.0 <= lo <= out[key]["mean"] <= hi <= 1.0, key
    assert out["psc"]["ci"][0] >= 0.0
    assert out["phase_accuracy"] == [0.5, 0.6]


def test_lm_train_says_whether_its_runs_show_a_weak_spot_and_what_to_run_for_one():
    from weakspots.cli import lm

    learning = {"phase_accuracy": [0.30, 0.35, 0.33, 0.31], "mean_accuracy": 0.326,
                "delta_max": 0.038, "delta_max_noise_floor": 0.084}  # fmt: skip
    line = lm._weak_spot_line(learning)
    assert line.startswith("no weak spot beyond the noise floor at this budget")
    assert "still learning" in line and lm.SHOWS_ONE in line
    shown = {**learning, "phase_accuracy": [0.98, 0.99, 0.998, 0.995], "mean_accuracy": 0.99,
             "delta_max": 0.0176, "delta_max_noise_floor": 0.0044}  # fmt: skip
    assert lm._weak_spot_line(shown) == (
        "weak spot: delta_max beyond its noise floor (worst phase 0, best 2)"
    )
    # the budget named is one whose recorded run shows a weak spot (docs/decoder_runs.md)
    flags = lm.SHOWS_ONE.split()[3:]
    config = lm.lm_config(build_parser().parse_args(["lm", "train", *flags]))
    assert (config.stride, config.pairs, config.steps, config.operator) == (4, 8, 2000, "mean_pool")
