"""Per-vendor tuning tables: which path and launch shape a device class gets.

One JSON file per vendor in `tables/` (schema in README.md next to this
file). A class has a `default` entry and ordered `rules`; every rule whose
conditions hold overrides some of path / wg_size / rows_per_wg / reduction,
later rules over earlier ones. `extends` names a class of the same table
whose default and rules come first (used for driver or arch overlays).
"""
from __future__ import annotations

import copy
import functools
import json
from pathlib import Path

from ..blocks.activations import ACTIVATION_PLANES, DEFAULT_ACTIVATIONS
from ..blocks.formats import FORMATS
from ..checks import is_int
from .classify import DeviceClass
from .config import ALL_PARAMS, OPTIONAL_PARAMS, PARAMS, PATHS, param_problems

TABLES_DIR = Path(__file__).parent / "tables"
VENDORS = ("nvidia", "amd", "intel", "apple", "qualcomm", "arm", "software", "unknown")

CONDITIONS = ("types", "paths", "activations", "k_min", "k_max", "rows_min", "rows_max", "ncols_min", "ncols_max")
META = ("basis", "note")
BASES = ("ggml", "measured", "guess")
# A class's occupancy floors (`occupancy`): per op, the fewest waves per SIMD
# (AMD) or warps per SM (NVIDIA) a pipeline may be compiled to, with the
# reason; `vkq pipelines` reports each pipeline's floor, and CI holds the
# GPU classes' pipelines to them on Mesa's compilers.
OCCUPANCY_OPS = ("mat-vec", "MUL_MAT_ID", "mat-mat", "MUL_MAT_ID mat-mat", "coopmat")
OCCUPANCY_UNITS = ("waves/SIMD", "warps/SM")
FALLBACK_CLASS = "unknown/*"  # in unknown.json: the last resort for every device


def load_table(vendor: str) -> dict:
    """The table of one vendor, validated (ValueError listing the problems)."""
    return copy.deepcopy(_load(vendor))  # the cached copy stays unmodified


@functools.lru_cache(maxsize=None)
def _load(vendor: str) -> dict:
    if vendor not in VENDORS:
        raise ValueError(f"no table for vendor {vendor!r}; tables exist for {', '.join(VENDORS)}")
    path = TABLES_DIR / f"{vendor}.json"
    table = json.loads(path.read_text())
    problems = validate_table(table)
    if table.get("vendor") != vendor:
        problems.append(f"vendor is {table.get('vendor')!r}, file is {path.name}")
    if problems:
        raise ValueError(f"{path.name}: " + "; ".join(problems))
    return table


def lookup(cls: DeviceClass, qtype: str, rows: int, k: int, ncols: int, path: str | None = None,
           activations: str = DEFAULT_ACTIVATIONS) -> tuple[dict, str, frozenset[str]]:
    """Parameters for one mat-vec (rows x k matrix, ncols vectors) on a class.

    The path is the caller's `path`, else the table's; then the rules apply
    in order, those with a `paths` condition only where it holds for that path
    (and an `activations` condition only where it names the call's
    activations: an int8-path launch, or the path such a call gets).
    Returns (params with path, wg_size, rows_per_wg, reduction; a description
    of the table entries that decided them, each rule by its label, basis and
    settings (its note: `rule_notes`); their bases, of BASES).
    """
    qtype = qtype.upper()
    if qtype not in FORMATS:
        raise ValueError(f"unknown block type {qtype!r}; expected one of {', '.join(FORMATS)}")
    table_name, class_key, table = _find_class(cls)
    default, rules = _resolve(table, class_key)
    if path is None:
        path = _apply(default, rules, class_key, qtype, rows, k, ncols, None, activations)[0]["path"]
    used_extra = []
    if path == "mmvq" and not FORMATS[qtype].has_int8_path:
        # As in ggml, a type without an int8 pipeline falls back to DMMV.
        path = "dmmv"
        used_extra.append(f"{qtype} has no int8 path -> dmmv")
    params, used, bases = _apply(default, rules, class_key, qtype, rows, k, ncols, path, activations)
    params["path"] = path
    desc = f"{_table_label(table_name, class_key, cls)}: " + "; ".join(used + used_extra)
    return params, desc, bases


def table_label(cls: DeviceClass) -> str:
    """How a choice's description (`lookup`) names the table and class of a
    device: 'table software.json class software/lavapipe (device software/lavapipe/mesa)'."""
    return _table_label(*_find_class(cls)[:2], cls)


def _table_label(table_name: str, class_key: str, cls: DeviceClass) -> str:
    return f"table {table_name} class {class_key} (device {cls.key})"


def occupancy_floors(cls: DeviceClass) -> dict[str, dict]:
    """The occupancy floors of a device's class by op (OCCUPANCY_OPS), each
    {"min", "unit", "reason"}: its own, over those of the classes it extends."""
    _, key, table = _find_class(cls)
    chain = []
    while key is not None:
        chain.append(table["classes"][key])
        key = table["classes"][key].get("extends")
    floors: dict[str, dict] = {}
    for c in reversed(chain):
        floors.update(c.get("occupancy", {}))
    return floors


def rule_notes(cls: DeviceClass) -> dict[str, str]:
    """The notes of the rules a device's class may apply, by the label a
    choice's description gives them ('rule 3', 'nvidia/* rule 2'): what each
    rule rests on, told once (a description names the rule, not its note)."""
    _, class_key, table = _find_class(cls)
    return {_rule_label(origin, i, class_key): rule["note"] for origin, i, rule in _resolve(table, class_key)[1]
            if rule.get("note")}


def _rule_label(origin: str, i: int, class_key: str) -> str:
    return f"rule {i}" if origin == class_key else f"{origin} rule {i}"


def _apply(default: dict, rules: list, class_key: str, qtype: str, rows: int, k: int, ncols: int,
           path: str | None, activations: str) -> tuple[dict, list[str], frozenset[str]]:
    """The default overridden by every matching rule, in order; path None
    skips the rules conditioned on a path (they cannot set one), a given path
    the rules that set another path and nothing else. Returns the
    parameters, a line per entry used and the entries' bases."""
    params = {p: default[p] for p in PARAMS}
    params.update({p: default.get(p, v) for p, v in OPTIONAL_PARAMS.items()})
    used, bases = [f"default [{default['basis']}]"], {default["basis"]}
    for origin, i, rule in rules:
        if not _matches(rule, qtype, rows, k, ncols):
            continue
        if "paths" in rule and (path is None or path not in rule["paths"]):
            continue
        if "activations" in rule and activations not in rule["activations"]:
            continue
        if path is not None and rule.get("path", path) != path and not any(p in rule for p in ALL_PARAMS
                                                                           if p != "path"):
            continue
        params.update({p: rule[p] for p in ALL_PARAMS if p in rule})
        set_ = ", ".join(f"{p}={rule[p]}" for p in ALL_PARAMS if p in rule)
        used.append(f"{_rule_label(origin, i, class_key)} [{rule['basis']}] {set_}")
        bases.add(rule["basis"])
    return params, used, frozenset(bases)


def _find_class(cls: DeviceClass) -> tuple[str, str, dict]:
    v, a, d = cls.vendor, cls.arch, cls.driver
    if v in VENDORS:
        table = _load(v)
        for key in (f"{v}/{a}/{d}", f"{v}/{a}", f"{v}/*/{d}", f"{v}/*"):
            if key in table["classes"]:
                return f"{v}.json", key, table
    return "unknown.json", FALLBACK_CLASS, _load("unknown")


def _resolve(table: dict, key: str) -> tuple[dict, list[tuple[str, int, dict]]]:
    """(merged default, [(class key, 1-based index, rule)]) following `extends`."""
    cls = table["classes"][key]
    if "extends" in cls:
        default, rules = _resolve(table, cls["extends"])
        default = {**default, **cls.get("default", {})}
    else:
        default, rules = dict(cls["default"]), []
    rules = rules + [(key, i, r) for i, r in enumerate(cls.get("rules", []), 1)]
    return default, rules


def _matches(rule: dict, qtype: str, rows: int, k: int, ncols: int) -> bool:
    if "types" in rule and qtype not in rule["types"]:
        return False
    for name, value in (("k", k), ("rows", rows), ("ncols", ncols)):
        if value < rule.get(f"{name}_min", value) or value > rule.get(f"{name}_max", value):
            return False
    return True


def class_entries(table: dict, key: str) -> list[tuple[str, dict]]:
    """Every entry of a class as the parameters it would produce: the merged
    default, then default + each rule's overrides (for checks and tests)."""
    default, rules = _resolve(table, key)
    out = [(f"{key} default", default)]
    for origin, i, rule in rules:
        out.append((f"{origin} rule {i}", {**default, **rule}))
    return out


def validate_table(table: dict) -> list[str]:
    """Problems with a table (empty list: fine)."""
    problems: list[str] = []
    _keys(problems, "table", table, ("vendor", "note", "classes"), required=("vendor", "classes"))
    classes = table.get("classes")
    if not isinstance(classes, dict) or not classes:
        return problems + ["table: 'classes' must be a non-empty object"]
    vendor = table.get("vendor")
    for key, cls in classes.items():
        where = f"class {key}"
        if not isinstance(cls, dict):
            problems.append(f"{where}: not an object")
            continue
        if len(key.split("/")) not in (2, 3) or key.split("/")[0] != vendor:
            problems.append(f"{where}: key must be '{vendor}/<arch or *>[/<driver>]'")
        _keys(problems, where, cls, ("default", "rules", "extends", "note", "occupancy"))
        floors = cls.get("occupancy", {})
        if not isinstance(floors, dict):
            problems.append(f"{where}: 'occupancy' must be an object of ops")
            floors = {}
        for op, floor in floors.items():
            if op not in OCCUPANCY_OPS:
                problems.append(f"{where}: occupancy of unknown op {op!r} (one of {OCCUPANCY_OPS})")
            elif not isinstance(floor, dict) or set(floor) != {"min", "unit", "reason"} \
                    or not is_int(floor["min"]) or floor["min"] < 1 or floor["unit"] not in OCCUPANCY_UNITS \
                    or not isinstance(floor["reason"], str) or not floor["reason"]:
                problems.append(f"{where}: occupancy of {op}: an object of 'min' (an integer >= 1), 'unit' "
                                f"(one of {OCCUPANCY_UNITS}) and 'reason'")
        base = cls.get("extends")
        if base is None and "default" not in cls:
            problems.append(f"{where}: needs a 'default' (or 'extends')")
        if base is not None and _extends_cycle(classes, key):
            problems.append(f"{where}: 'extends' {base!r} is missing or cyclic")
        if "default" in cls:
            full = base is None  # an overlay's default may set only some params
            _entry(problems, f"{where} default", cls["default"], allow=ALL_PARAMS + META,
                   required=PARAMS if full else ())
        rules = cls.get("rules", [])
        if not isinstance(rules, list):
            problems.append(f"{where}: 'rules' must be a list")
            continue
        for i, rule in enumerate(rules, 1):
            _entry(problems, f"{where} rule {i}", rule, allow=ALL_PARAMS + META + CONDITIONS, required=())
            if isinstance(rule, dict) and not any(p in rule for p in ALL_PARAMS):
                problems.append(f"{where} rule {i}: overrides nothing")
    return problems


def _extends_cycle(classes: dict, key: str) -> bool:
    seen = {key}
    while "extends" in classes.get(key, {}):
        key = classes[key]["extends"]
        if key in seen or key not in classes:
            return True
        seen.add(key)
    return False


def _keys(problems, where, obj, allow, required=()):
    if not isinstance(obj, dict):
        problems.append(f"{where}: not an object")
        return
    problems += [f"{where}: unknown key {k!r}" for k in obj if k not in allow]
    problems += [f"{where}: missing {k!r}" for k in required if k not in obj]


def _entry(problems: list[str], where: str, e: dict, allow, required) -> None:
    _keys(problems, where, e, allow, required)
    if not isinstance(e, dict):
        return
    if e.get("basis") not in BASES:
        problems.append(f"{where}: basis must be one of {BASES}")
    elif e["basis"] in ("ggml", "guess") and not e.get("note"):
        problems.append(f"{where}: a {e['basis']} entry needs a note (cite the rule / say why)")
    problems += param_problems(e, where)
    paths = e.get("paths")
    if paths is not None:
        if not isinstance(paths, list) or not paths or any(p not in PATHS for p in paths):
            problems.append(f"{where}: 'paths' must be a non-empty list of {PATHS}")
        if "path" in e:
            problems.append(f"{where}: a rule conditioned on 'paths' cannot set 'path'")
    acts = e.get("activations")
    if acts is not None:
        if not isinstance(acts, list) or not acts or any(a not in ACTIVATION_PLANES for a in acts):
            problems.append(f"{where}: 'activations' must be a non-empty list of {tuple(ACTIVATION_PLANES)}")
        if paths != ["mmvq"] and "path" not in e:
            problems.append(f"{where}: a rule conditioned on 'activations' needs 'paths': ['mmvq'] (the int8 "
                            "path's launch: only it has activations) or sets 'path' (the path a call asking "
                            "for these activations gets)")
    types = e.get("types")
    if types is not None:
        if not isinstance(types, list) or not types:
            problems.append(f"{where}: 'types' must be a non-empty list")
        else:
            problems += [f"{where}: unknown type {t!r}" for t in types if t not in FORMATS]
            plain = [t for t in types if t in FORMATS and not FORMATS[t].has_int8_path]
            if e.get("path") == "mmvq" and plain:
                problems.append(f"{where}: mmvq for {plain}, which have no int8 path")
    for name in ("k", "rows", "ncols"):
        lo, hi = e.get(f"{name}_min"), e.get(f"{name}_max")
        for bound, v in ((f"{name}_min", lo), (f"{name}_max", hi)):
            if v is not None and (not is_int(v) or v < 0):
                problems.append(f"{where}: {bound} {v!r} is not an integer >= 0")
        if is_int(lo) and is_int(hi) and lo > hi:
            problems.append(f"{where}: {name}_min > {name}_max (never matches)")

