"""The core binding on the sim backend: objects, stats, configuration and errors."""

import ctypes
import gc
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import gpupart
from gpupart import _lib

from conftest import MiB


def test_library_is_version_0_2():
    assert gpupart.version().startswith("0.3.")


# ctypes struct -> (C type name, C header) for the layout check.
_STRUCTS = {
    _lib.ContextDesc: "gpupart_context_desc", _lib.DeviceInfoC: "gpupart_device_info",
    _lib.DeviceDesc: "gpupart_device_desc", _lib.SimDescC: "gpupart_sim_desc",
    _lib.PartitionDesc: "gpupart_partition_desc", _lib.AllocDesc: "gpupart_alloc_desc",
    _lib.AllocationInfoC: "gpupart_allocation_info", _lib.StatsC: "gpupart_stats",
}
# GPUPART_TEST_INCLUDE_DIR: the headers of the library under test, when it is not this checkout's.
_INCLUDE = Path(os.environ.get("GPUPART_TEST_INCLUDE_DIR") or Path(__file__).resolve().parents[2] / "include")


@pytest.mark.skipif(not shutil.which("cc") or not (_INCLUDE / "gpupart.h").exists(),
                    reason="needs a C compiler and the repository's include/")
def test_ctypes_structs_match_the_c_header_field_for_field(tmp_path):
    lines = ["#include <gpupart.h>", "#include <stddef.h>", "#include <stdio.h>", "int main(void) {"]
    for cls, cname in _STRUCTS.items():
        lines.append(f'printf("{cname} %zu\\n", sizeof({cname}));')
        for field, _ in cls._fields_:
            lines.append(f'printf("{cname}.{field} %zu\\n", offsetof({cname}, {field}));')
    (tmp_path / "layout.c").write_text("\n".join(lines + ["return 0;", "}"]))
    exe = tmp_path / "layout"
    subprocess.run(["cc", "-std=c11", f"-I{_INCLUDE}", str(tmp_path / "layout.c"), "-o", str(exe)], check=True)
    c_side = dict(line.rsplit(" ", 1) for line in subprocess.run([str(exe)], check=True, capture_output=True,
                                                                  text=True).stdout.splitlines())
    py_side = {}
    for cls, cname in _STRUCTS.items():
        py_side[cname] = str(ctypes.sizeof(cls))
        for field, _ in cls._fields_:
            py_side[f"{cname}.{field}"] = str(getattr(cls, field).offset)
    assert py_side == c_side


def test_alloc_and_free_update_partition_stats(sim):
    p = sim.partition("train", limit=64 * MiB)
    a = p.alloc(3 * MiB)
    s = p.stats
    assert (s.limit, s.in_use, s.live_allocations, s.total_allocations) == (64 * MiB, 3 * MiB, 1, 1)
    assert s.reserved >= 3 * MiB and s.driver_allocs >= 1
    a.free()
    s = p.stats
    assert (s.in_use, s.live_allocations, s.total_frees, s.peak_in_use) == (0, 0, 1, 3 * MiB)


def test_available_is_what_the_partition_can_still_allocate(sim):
    p = sim.partition("avail", limit=64 * MiB)
    assert p.available == 64 * MiB
    a = p.alloc(3 * MiB)
    assert p.available == 64 * MiB - 3 * MiB
    with pytest.raises(gpupart.LimitError):
        p.alloc(p.available + 1)
    a.free()
    assert p.available == 64 * MiB


def test_charges_are_accounted_to_the_byte_and_released_once(sim):
    p = sim.partition("charged", limit=64 * MiB)
    c = p.charge(12345)
    assert (c.size, p.chargeable, p.stats.in_use, p.stats.driver_allocs) == (12345, 64 * MiB - 12345, 12345, 0)
    rest = p.charge(p.chargeable)
    with pytest.raises(gpupart.LimitError, match="cannot charge 1 bytes"):
        p.charge(1)
    c.release()
    c.release()  # idempotent in Python
    rest.release()
    assert (p.stats.in_use, p.stats.live_allocations, p.stats.double_frees) == (0, 0, 0)
    with p.charge(MiB) as held:
        assert held.size == MiB
    assert p.stats.in_use == 0
    with pytest.raises(gpupart.InvalidArgument):
        p.charge(0)


def test_allocation_info_points_into_host_backed_memory(sim):
    p = sim.partition(limit=16 * MiB)
    with p.alloc(4096, 4096) as a:
        info = a.info
        assert info.size == 4096 and info.device_address % 4096 == 0
        assert info.offset + info.size <= info.block_size
        ctypes.memset(info.device_address, 0x5A, info.size)  # host-backed: writable
        assert ctypes.string_at(info.device_address, 4) == b"ZZZZ"


def test_with_block_frees_the_allocation_and_destroys_the_partition(sim):
    with sim.partition("tmp", limit=8 * MiB) as p:
        with p.alloc(MiB) as a:
            pass
        assert a.closed and p.stats.live_allocations == 0
    assert p.closed and sim.find("tmp") is None


def test_dropped_allocation_is_freed_by_its_finalizer(sim):
    p = sim.partition(limit=8 * MiB)
    p.alloc(MiB)
    gc.collect()
    assert p.stats.live_allocations == 0 and p.stats.total_frees == 1


def test_limit_reached_raises_limit_error_with_the_library_message(sim):
    p = sim.partition("small", limit=4 * MiB)
    with pytest.raises(gpupart.LimitError) as info:
        p.alloc(8 * MiB)
    err = info.value
    assert err.name == "GPUPART_ELIMIT" and err.code == -4
    assert isinstance(err, MemoryError) and isinstance(err, gpupart.Error)
    assert "small" in err.message and err.message == gpupart.last_error()
    assert "GPUPART_ELIMIT" in str(err)
    assert p.stats.failed_allocations == 1


def test_every_result_code_has_its_own_exception_class():
    from gpupart.errors import BY_CODE

    lib = _lib.lib()
    assert sorted(BY_CODE) == list(range(-12, 0))
    for code, cls in BY_CODE.items():
        assert lib.gpupart_result_name(code).decode() == cls.name
        assert issubclass(cls, gpupart.Error)


def test_destroying_a_partition_with_live_allocations_is_busy(sim):
    p = sim.partition(limit=8 * MiB)
    a = p.alloc(MiB)
    with pytest.raises(gpupart.Busy):
        p.close()
    a.free()
    p.close()
    with pytest.raises(gpupart.InvalidArgument, match="already released"):
        p.alloc(MiB)


def test_duplicate_partition_name_raises_exists(sim):
    sim.partition("a", limit=MiB * 2)
    with pytest.raises(gpupart.Exists):
        sim.partition("a", limit=MiB * 4)


def test_device_stats_sum_partitions_and_check_passes(sim):
    p, q = sim.partition("p", limit=16 * MiB), sim.partition("q", limit=16 * MiB)
    a, b = p.alloc(MiB), q.alloc(2 * MiB)
    assert sim.stats.in_use == 3 * MiB and sim.stats.live_allocations == 2
    assert [x.name for x in sim.partitions] == ["p", "q"]
    sim.check()
    a.free(), b.free()


def test_resize_trim_and_reset_peak(sim):
    p = sim.partition(limit=16 * MiB)
    p.alloc(4 * MiB).free()
    p.trim()
    assert p.stats.reserved == 0
    p.reset_peak()
    assert p.stats.peak_in_use == 0
    p.resize(32 * MiB)
    assert p.stats.limit == 32 * MiB


def test_config_text_declares_partitions_created_at_open(ctx):
    text = "[gpupart]\nbackend = sim\nmemory_limit = 256MiB\n[partition train]\nsize = 50%\nguarantee = 25%\n"
    with gpupart.Context(ignore_env=True, config_text=text) as c, c.open_device() as dev:
        assert dev.backend == "sim" and dev.budget == 256 * MiB
        (train,) = dev.partitions
        assert train.name == "train"
        assert (train.stats.limit, train.stats.guarantee) == (128 * MiB, 64 * MiB)
        assert dev.find("train") is train  # one wrapper per C partition
        assert dev.partition("train", reclaim=lambda p, n: None) is train  # the configured one, handed over once
        with pytest.raises(gpupart.Exists):
            dev.partition("train")


def test_bad_config_text_raises_config_error():
    with pytest.raises(gpupart.ConfigError) as info:
        gpupart.Context(ignore_env=True, config_text="[gpupart]\nmemory_fraction = 150%\n")
    assert info.value.name == "GPUPART_ECONFIG" and "memory_fraction" in info.value.message


def test_device_desc_fields_set_the_budget(ctx):
    with ctx.open_device("sim", memory_fraction=0.5, headroom=64 * MiB,
                         sim=gpupart.SimDesc(total_bytes=1 << 30)) as dev:
        assert dev.budget == 512 * MiB - 64 * MiB
        assert dev.info.total_bytes == 1 << 30


def test_preallocating_partition_reserves_its_limit(ctx):
    with ctx.open_device("sim", growth="off", sim=gpupart.SimDesc(total_bytes=1 << 30)) as dev:
        p = dev.partition(limit=32 * MiB)
        assert p.stats.reserved == 32 * MiB


def test_sim_driver_failure_raises_device_memory_error(ctx):
    with ctx.open_device("sim", sim=gpupart.SimDesc(total_bytes=1 << 30, fail_block_alloc_at=1)) as dev:
        p = dev.partition(limit=16 * MiB)
        with pytest.raises(gpupart.DeviceMemoryError):
            p.alloc(MiB)


def test_a_sim_device_can_carry_a_real_gpus_uuid(ctx):
    uuid = bytes(range(0xa0, 0xb0))
    with ctx.open_device("sim", index=3, sim=gpupart.SimDesc(total_bytes=1 << 30, uuid=uuid)) as dev:
        assert dev.info.uuid == uuid
    with pytest.raises(gpupart.InvalidArgument):
        ctx.open_device("sim", sim=gpupart.SimDesc(total_bytes=1 << 30, uuid=b"short"))


def test_reclaim_callback_is_asked_for_memory(sim):
    held = []

    def reclaim(partition, wanted):
        assert wanted > 0
        while held:
            held.pop().free()

    p = sim.partition("cache", limit=4 * MiB, reclaim=reclaim)
    held.append(p.alloc(3 * MiB))
    with p.alloc(3 * MiB):
        assert not held


def test_unknown_backend_name_is_invalid_argument(ctx):
    with pytest.raises(gpupart.InvalidArgument, match="unknown backend"):
        ctx.open_device("metal")


def test_closing_a_device_with_live_allocations_is_busy_and_keeps_it_usable(ctx):
    dev = ctx.open_device("sim", sim=gpupart.SimDesc(total_bytes=1 << 30))
    a = dev.partition(limit=4 * MiB).alloc(MiB)
    with pytest.raises(gpupart.Busy):
        dev.close()
    with pytest.raises(gpupart.Busy):
        ctx.close()
    a.free()
    dev.close()
    assert dev.closed


def test_enumerate_sim_lists_its_device(ctx):
    infos = ctx.enumerate("sim")
    assert infos and infos[0].backend == "sim"


def test_stats_as_dict_has_every_c_field(sim):
    assert list(sim.stats.as_dict()) == _lib.STATS_FIELDS


def test_the_python_library_variable_is_not_a_configuration_error(monkeypatch):
    monkeypatch.setenv("GPUPART_PYTHON_LIBRARY", _lib.lib()._gpupart_path)
    gpupart.Context().close()  # reads the environment: GPUPART_PYTHON_* is not the library's


def test_an_unknown_free_figure_is_none_not_uint64_max(ctx):
    c = _lib.DeviceInfoC(backend=_lib.BACKEND_VULKAN, total_bytes=1 << 30, free_bytes=2**64 - 1)
    assert gpupart.core.DeviceInfo._from(c).free_bytes is None
    c.free_bytes = 5
    assert gpupart.core.DeviceInfo._from(c).free_bytes == 5
    for info in ctx.enumerate():  # Vulkan without VK_EXT_memory_budget, PoCL: the driver cannot tell
        assert info.free_bytes is None or 0 <= info.free_bytes <= info.total_bytes, info


@pytest.mark.parametrize("size", [2**64, 2**64 + MiB, -1, -MiB, 2**70])
def test_alloc_refuses_a_size_c_cannot_hold_naming_it(sim, size):
    p = sim.partition("sizes", limit=64 * MiB)
    with pytest.raises(gpupart.InvalidArgument, match=f"alloc: size {size}"):
        p.alloc(size)
    assert p.stats.total_allocations == 0 and p.stats.in_use == 0


def test_integers_out_of_their_c_range_are_refused_everywhere(ctx, sim):
    p = sim.partition("ints", limit=64 * MiB)
    for call in (lambda: p.alloc(MiB, -256), lambda: p.alloc(MiB, tag=2**64), lambda: p.alloc(MiB, flags=2**32),
                 lambda: p.resize(-1), lambda: sim.partition("x", limit=2**64),
                 lambda: sim.partition("y", guarantee=-1), lambda: ctx.open_device("sim", index=-1),
                 lambda: ctx.open_device("sim", memory_limit=2**64),
                 lambda: ctx.open_device("sim", sim=gpupart.SimDesc(total_bytes=-1))):
        with pytest.raises(gpupart.InvalidArgument, match="out of range"):
            call()
    with pytest.raises(TypeError, match="1.5"):
        p.alloc(1.5)
    assert [q.name for q in sim.partitions] == ["ints"] and p.stats.limit == 64 * MiB


@pytest.mark.parametrize("name", ["a\0b", "\0", "train\0"])
def test_a_name_with_a_nul_is_refused_not_cut(sim, name):
    with pytest.raises(gpupart.InvalidArgument, match="NUL"):
        sim.partition(name)
    assert sim.partitions == [] and sim.find("a") is None
    with pytest.raises(gpupart.InvalidArgument, match="NUL"):
        sim.find(name)


def test_context_strings_with_a_nul_are_refused():
    for kwargs in ({"config_text": "[gpupart]\nbackend = sim\0junk"}, {"config_path": "/etc\0/x"},
                   {"ledger_dir": "/tmp\0x"}):
        with pytest.raises(gpupart.InvalidArgument, match="NUL"):
            gpupart.Context(ignore_env=True, **kwargs)


def test_context_option_resolves_an_option_for_one_device():
    text = "[gpupart]\nmax_block = 64MiB\nexpandable = true\n[device cuda:1]\nmax_block = 8MiB\nexpandable = false\n"
    with gpupart.Context(ignore_env=True, config_text=text) as c:
        assert c.option("cuda", 0, "max_block") == str(64 * MiB)
        assert c.option("cuda", 1, "max_block") == str(8 * MiB)
        assert c.option("cuda", 0, "expandable") == "true"
        assert c.option("cuda", 1, "EXPANDABLE") == "false"
        assert c.option("sim", 3, "device") == "3"  # the index asked for: the visible list is not applied


def test_context_option_refuses_what_is_no_option_or_no_device():
    with gpupart.Context(ignore_env=True) as c:
        assert c.option("sim", 0, "expandable") == "false"  # the default
        with pytest.raises(gpupart.InvalidArgument, match="'expandible'"):
            c.option("sim", 0, "expandible")
        with pytest.raises(gpupart.InvalidArgument):
            c.option("auto", 0, "expandable")
        with pytest.raises(gpupart.InvalidArgument, match="unknown backend"):
            c.option("tpu", 0, "expandable")
        with pytest.raises(gpupart.InvalidArgument, match="out of range"):
            c.option("sim", -1, "expandable")
        with pytest.raises(gpupart.InvalidArgument, match="NUL"):
            c.option("sim", 0, "expand\0able")
        with pytest.raises(TypeError):
            c.option("sim", 0, None)


def test_the_caller_s_environment_is_pinned():
    """conftest.py pins what a context reading the environment sees: a GPUPART_MEMORY_LIMIT
    or an orchestrator's share in the caller's shell changes no budget here."""
    sim = gpupart.SimDesc(total_bytes=1 << 30)
    with gpupart.Context(ignore_env=True) as quiet, quiet.open_device("sim", sim=sim) as d:
        expected = d.budget
    with gpupart.Context() as c, c.open_device("sim", sim=sim) as dev:
        assert dev.budget == expected
        dev.partition("job").alloc(64 * MiB).free()
    mine = ("GPUPART_TEST_", "GPUPART_PYTHON_", "GPUPART_DRA_METADATA_DIR")
    assert not [k for k in os.environ if k.startswith("GPUPART_") and not k.startswith(mine)]
    dra = Path(os.environ["GPUPART_DRA_METADATA_DIR"])
    assert dra.is_dir() and not any(dra.iterdir())
