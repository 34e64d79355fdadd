"""The library's parameter table (``ssb4d_params``): every operation's parameters with their type,
unit, range, default and help, read once at import. The keyword checks of :class:`Session`'s
methods store values through it (the library checks them, as it does for the command line and
the viewer) and their docstrings list its rows.

Nothing here is public API.
"""
import ctypes
import math
import textwrap

from . import _lib
from .errors import InvalidArgument

OP_FIT, OP_ABERRATIONS, OP_THICK, OP_PREVIEW, OP_CALIBRATE, OP_REFINE = range(6)
_TYPES = ('double', 'pair', 'int', 'size', 'u64', 'bool', 'enum')
_AUTO = 2


class Param:
    """One row: name, unit, range, default, choices, help (and the C row it came from)."""

    def __init__(self, row):
        self._row = row
        self.name = row.name.decode()
        self.option = row.option.decode() if row.option else None
        self.type = _TYPES[row.type]
        self.unit = row.unit.decode()
        self.min, self.max, self.default = row.min, row.max, row.default
        self.choices = row.choices.decode().split('|') if row.choices else None
        self.help = row.help.decode()
        buf = ctypes.create_string_buffer(160)
        self.describe = _lib.lib.ssb4d_param_describe(ctypes.byref(row), buf, len(buf)).decode()

    def __repr__(self):
        return 'Param(%r, %s, %s)' % (self.name, self.type, self.describe)

    def doc(self):
        """'trials: global candidates … (a whole number in 1..1000000; default 64)'."""
        d = ''
        if self.type == 'enum':
            d = repr(self.choices[int(self.default)])
        elif self.type == 'bool':
            d = str(bool(self.default))
        elif not math.isnan(self.default):
            d = '%g' % self.default
        if '{default}' in self.help:  # the help places it
            return '%s: %s (%s)' % (self.name, self.help.replace('{default}', d), self.describe)
        return '%s: %s (%s%s)' % (self.name, self.help, self.describe, '; default ' + d if d else '')


def _read(op):
    n = ctypes.c_size_t()
    rows = _lib.lib.ssb4d_params(op, ctypes.byref(n))
    return {r.name: r for r in (Param(rows[i]) for i in range(n.value))}


TABLE = {op: _read(op) for op in range(6)}


def set_param(op, struct, name, value):
    """Stores value (a Python value: a number, True/False, a choice's name, a (row, col) pair)
    into struct (the ctypes mirror of op's struct) through the library's check: InvalidArgument
    names the parameter and its range."""
    p = TABLE[op][name]
    v = (ctypes.c_double * 2)(math.nan, math.nan)
    try:
        if p.type == 'enum':
            if value not in p.choices:
                raise InvalidArgument('%s must be %s, not %r' % (name, p.describe, value))
            v[0] = p.choices.index(value)
        elif p.type == 'bool':
            v[0] = 1.0 if value else 0.0
        elif p.type == 'pair':
            a = tuple(value) if hasattr(value, '__len__') else (value, value)
            if len(a) != 2:
                raise TypeError
            v[0], v[1] = float(a[0]), float(a[1])
        elif p.type == 'u64':  # exact beyond 2**53: stored here after the same check
            if isinstance(value, bool) or int(value) != value or not p.min <= int(value) < 2 ** 64:
                raise TypeError
            setattr(struct, name, int(value))
            return
        elif value == 'auto' and p._row.flags & _AUTO:
            v[0] = 0.0
        else:
            if isinstance(value, bool) or (p.type != 'double' and float(value) != int(value)):
                raise TypeError
            v[0] = float(value)
    except (TypeError, ValueError, OverflowError):
        raise InvalidArgument('%s must be %s, not %r' % (name, p.describe, value)) from None
    err = _lib.Err()
    _lib.check(_lib.lib.ssb4d_param_set(ctypes.byref(p._row), ctypes.byref(struct), v, ctypes.byref(err)), err)


def doc(op, names, indent='        '):
    """The docstring lines of op's rows named in names, one per row."""
    return '\n'.join(textwrap.fill(TABLE[op][n].doc(), 100, initial_indent=indent, subsequent_indent=indent + '    ')
                     for n in names)
