"""The one way the project reads YAML: PyYAML's safe loader that also refuses a key given twice.

Plain ``yaml.safe_load`` keeps the last of two equal keys without a word (``epochs: 1`` then ``epochs: 90``
trains 90 epochs). :func:`read_yaml` refuses it naming the key and both lines, and turns every YAML error
(a bad indentation, a ``!!python/object`` tag, a torn file) into one line naming the file. A YAML 1.1 base-60
number (``1:00:00``) is kept as the text written, as YAML 1.2 reads it. No torch here.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import yaml


class YamlFileError(ValueError):
    """A YAML file (or value) the project cannot use: one line naming the file, the place and the fix."""


_MOST_BITS = 14_000  # about 4,214 decimal digits: every whole number read can be shown again (the limit is 4,300)


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that raises on a mapping holding one key twice."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark.line + 1)
            except TypeError:  # an unhashable key: SafeLoader's own error names it
                break
            if first != key_node.start_mark.line + 1:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice (lines {first} and {key_node.start_mark.line + 1})",
                    key_node.start_mark)
        return super().construct_mapping(node, deep)


    def construct_yaml_int(self, node):
        """An integer, but YAML 1.1's base 60 (``1:00:00`` read as 3600) kept as the text written, as YAML 1.2
        reads it: a site's unquoted ``time: 1:00:00`` reached sbatch as 3,600 minutes (r43m)."""
        if ":" in node.value:
            return self.construct_scalar(node)
        try:
            value = super().construct_yaml_int(node)
        except ValueError:  # past Python's int-to-text limit (r43x: a site's env value of 5,000 digits)
            value = None
        if value is None or value.bit_length() > _MOST_BITS:  # r43y: hex, octal and binary are read without it
            raise yaml.constructor.ConstructorError(
                None, None, f"a whole number of {len(node.value):,} characters, too large to use (the most is "
                f"about {_MOST_BITS * 30103 // 100000:,} decimal digits; Python reads at most "
                f"{sys.get_int_max_str_digits():,})", node.start_mark) from None
        return value

    def construct_yaml_float(self, node):
        """A float, but base 60 (``1:30.5``) kept as the text written (see :meth:`construct_yaml_int`)."""
        return self.construct_scalar(node) if ":" in node.value else super().construct_yaml_float(node)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _UniqueKeyLoader.construct_mapping)
_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", _UniqueKeyLoader.construct_yaml_int)
_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:float", _UniqueKeyLoader.construct_yaml_float)


def parse_yaml(text: str, where: str):
    """The value of YAML ``text`` (safe types only, no key twice); YamlFileError names ``where``."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError:  # PyYAML composes nested lists and mappings recursively: 10,000 `[` exhaust the stack
        raise YamlFileError(f"{where}: its lists or mappings are nested too deeply to read (Python's recursion "
                            "limit). Fix: write the settings as plain field: value lines.") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        if "could not determine a constructor" in problem:
            problem += " (only plain YAML values are read: no Python objects, nothing is run)"
        raise YamlFileError(f"{where}: not usable YAML{at}: {' '.join(str(problem).split())}. Fix: correct "
                            "that line (each key once, plain values).") from None


def read_yaml(path: str | os.PathLike, what: str):
    """The value of the YAML file ``path`` (``what`` names the setting it came from in messages)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise YamlFileError(f"{what}: {str(path)!r} is not a UTF-8 text file. Fix: pass a YAML file.") from None
    return parse_yaml(text, f"{what} {str(path)!r}")
