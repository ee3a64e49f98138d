"""Schemathesis hooks for dapi (scripts/schemathesis.sh loads them).

Some of dapi's (CNAPI's) checks span several fields or need a regex engine, and cannot be
written in JSON Schema. Generated bodies that break them are dropped instead of being counted
as valid requests dapi refuses:
* `vm.ram` (each VM's, in a batch) must lie within its image's `requirements.min_ram`/`max_ram`
  (a batch VM's own `image`, else the body's `image`, else `img`);
* the VMs of a batch (`vms`) have distinct `vm_uuid`s;
* a `re` affinity value must compile in XRegExp's dialect (tested by unit tests and the
  `affinity` fuzz target instead: bodies with one are dropped here);
* a batch (`vms` or `count` in the body) is not explained: `explain=true` or a `why_not` in
  the query with one is a 422 naming `explain`.
"""

import schemathesis


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _image(holder):
    """The image a body (or a batch VM) carries: `image`, else `img`, as dapi reads them."""
    for key in ("image", "img"):
        if holder.get(key) is not None:
            return holder[key]
    return None


def _vms(body):
    """Each VM with the image it is checked against: a batch VM's own image, else the body's."""
    shared = _image(body)
    pairs = [(body.get("vm"), shared)]
    if isinstance(body.get("vms"), list):
        pairs += [(vm, _image(vm) if isinstance(vm, dict) and vm.get("image") is not None else shared)
                  for vm in body["vms"]]
    return [(vm, image) for vm, image in pairs if isinstance(vm, dict)]


def _distinct_batch_uuids(body):
    uuids = [vm.get("vm_uuid") for vm in body.get("vms") or [] if isinstance(vm, dict) and vm.get("vm_uuid")]
    return len(uuids) == len(set(map(str, uuids)))


def _no_regex_affinity(body):
    for vm, _ in _vms(body):
        rules = vm.get("affinity")
        if isinstance(rules, list) and any(isinstance(r, dict) and r.get("valueType") == "re" for r in rules):
            return False
    return True


def _ram_within_requirements(vm, image):
    if not isinstance(image, dict):
        return True
    requirements = image.get("requirements")
    ram = vm.get("ram")
    if not isinstance(requirements, dict) or not _number(ram):
        return True
    for key, fits in (("min_ram", lambda x: ram >= x - 0.01), ("max_ram", lambda x: ram <= x + 0.01)):
        limit = requirements.get(key)
        if limit in (None, False, 0, ""):
            continue  # checked only when truthy
        if not _number(limit) or not fits(limit):
            return False
    return True


@schemathesis.hook
def filter_body(ctx, body):
    if not isinstance(body, dict):
        return True
    return (
        all(_ram_within_requirements(vm, image) for vm, image in _vms(body))
        and _distinct_batch_uuids(body)
        and _no_regex_affinity(body)
    )


def _values(query, key):
    value = query.get(key)
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]


@schemathesis.hook
def filter_case(ctx, case):
    body = case.body if isinstance(case.body, dict) else {}
    query = case.query if isinstance(case.query, dict) else {}
    batch = "vms" in body or "count" in body
    explaining = any(v.lower() in ("true", "1", "") for v in _values(query, "explain")) or any(
        part for v in _values(query, "why_not") for part in v.split(",")
    )
    return not (batch and explaining)
