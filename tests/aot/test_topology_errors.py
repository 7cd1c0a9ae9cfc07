"""--topology mistakes end in one line naming the flag."""
import sys

import pytest

from encoder import errors
from encoder.aot import compile_report


def test_without_libtpu_the_error_is_the_users_to_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "libtpu", None)  # `import libtpu` raises ImportError
    with pytest.raises(errors.UsageError, match="--topology=v5e:2x2 compiles with libtpu"):
        compile_report.topology_devices("v5e:2x2")
    assert errors.is_user_facing(errors.UsageError())


def test_a_name_libtpu_cannot_read_names_the_flag():
    pytest.importorskip("libtpu")
    with pytest.raises(errors.UsageError, match=r"--topology=bogus: .*e\.g\. v5e:2x2"):
        compile_report.topology_devices("bogus")
