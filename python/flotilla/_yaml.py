"""A YAML writer for job files: nested mappings in block style, lists in
flow style, strings quoted unless they are plain words or paths.  Enough for
what config.c reads; the standard library has no YAML."""
import json
import os
import re

_PLAIN = re.compile(r"^[A-Za-z_/.][A-Za-z0-9_./+-]*$")
_RESERVED = {"true", "false", "yes", "no", "on", "off", "null", "y", "n"}


def scalar(v):
    """One value as YAML text; numpy scalars are taken as Python ones."""
    if hasattr(v, "item") and not isinstance(v, (list, tuple, dict)):
        v = v.item()
    if isinstance(v, os.PathLike):
        v = os.fspath(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(scalar(x) for x in v) + "]"
    if isinstance(v, str):
        if _PLAIN.match(v) and v.lower() not in _RESERVED:
            return v
        return json.dumps(v)
    raise TypeError(f"cannot write {type(v).__name__} {v!r} into a job file")


def dump(doc, indent=0):
    """doc (a dict of dicts and values) as YAML text; None values are left out."""
    lines = []
    pad = "  " * indent
    for k, v in doc.items():
        if v is None:
            continue
        if isinstance(v, dict) and v:
            lines.append(f"{pad}{k}:")
            lines.append(dump(v, indent + 1))
        elif isinstance(v, dict):
            lines.append(f"{pad}{k}: {{}}")
        else:
            lines.append(f"{pad}{k}: {scalar(v)}")
    return "\n".join(line for line in lines if line)
