"""Prints on stdout, at import and during calls, through Python or straight to fd 1, cannot corrupt
the protocol (the worker keeps a private stdout); a module that cannot load fails the handshake
(exit 2) with its reason."""
import textwrap

import pytest

import attncheck as ac

NOISY = textwrap.dedent("""
    import os
    import attncheck as ac
    from numpy_subjects import merge_states
    print("import-time chatter")
    def merge(call):
        print("chatty", call.case_id)
        os.write(1, b"raw write to fd 1\\n")
        return merge_states(call)
    noisy = ac.subject(name="noisy-merge", ops="merge", dtypes="fp32")(merge)
""")


def test_prints_do_not_break_the_protocol(binary, tmp_path):
    (tmp_path / "noisy.py").write_text(NOISY)
    r = ac.check(f"{tmp_path / 'noisy.py'}:noisy", properties="accuracy", cases=5, report_dir=tmp_path / "r",
                 binary=binary)
    assert r.exit_code == 0


def test_unloadable_module_fails_the_handshake(binary, tmp_path):
    (tmp_path / "broken.py").write_text("raise ImportError('no kernel library here')\n")
    with pytest.raises(ac.AttncheckFailure) as e:
        ac.check(f"{tmp_path / 'broken.py'}:x", report_dir=tmp_path / "r", binary=binary)
    assert e.value.result.exit_code == 2
    assert "no kernel library here" in str(e.value)
