"""How the compiled module is linked: it exports its init function and nothing else, so no other
library in the process can interpose on the C++ code inside it, nor it on theirs (an interposed
C++ runtime can crash on a contract error with a number in its message).

Reads the ELF dynamic symbol table directly (no binutils needed); Linux only."""

import struct
import sys

import pytest

import dsv4kv

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ELF checks are Linux-only")

STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE = 1, 2, 10
SHT_DYNSYM, SHT_DYNAMIC = 11, 6
DT_NEEDED, DT_STRTAB = 1, 5


def elf_dynamic(path):
    """(defined exported symbols as (name, binding), DT_NEEDED names) of a 64-bit little-endian ELF."""
    data = open(path, "rb").read()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, "expected a 64-bit little-endian ELF"
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]

    def cstr(offset):
        return data[offset:data.index(b"\0", offset)].decode()

    exported, needed = [], []
    for _name, kind, _flags, _addr, off, size, link, _info, _align, entsize in sections:
        strtab = sections[link][4]
        if kind == SHT_DYNSYM:
            for i in range(1, size // entsize):
                st_name, st_info, _other, st_shndx = struct.unpack_from("<IBBH", data, off + i * entsize)
                if st_shndx != 0 and st_info >> 4 in (STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE):
                    exported.append((cstr(strtab + st_name), st_info >> 4))
        elif kind == SHT_DYNAMIC:
            for i in range(size // 16):
                tag, val = struct.unpack_from("<qQ", data, off + i * 16)
                if tag == DT_NEEDED:
                    needed.append(cstr(strtab + val))
    return exported, needed


def test_only_the_init_function_is_exported():
    exported, _ = elf_dynamic(dsv4kv._ext.__file__)
    assert [name for name, _ in exported] == ["PyInit__ext"], (
        f"{dsv4kv._ext.__file__} exports {len(exported)} symbols, e.g. {sorted(exported)[:10]}")


def test_the_torch_fast_path_exports_only_its_init_function():
    # dsv4kv._torch_ext holds its own copy of the library's C++ code: the same isolation.
    import importlib.util

    spec = importlib.util.find_spec("dsv4kv._torch_ext")
    if spec is None:
        pytest.skip("dsv4kv._torch_ext is not built (torch was not importable at build time)")
    exported, _ = elf_dynamic(spec.origin)
    assert [name for name, _ in exported] == ["PyInit__torch_ext"], (
        f"{spec.origin} exports {len(exported)} symbols, e.g. {sorted(exported)[:10]}")


def test_the_reader_sees_libc():
    # The ELF reader itself: the module needs the C library whatever else it links.
    _, needed = elf_dynamic(dsv4kv._ext.__file__)
    assert any(n.startswith("libc.so") for n in needed), needed
