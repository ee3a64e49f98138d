"""Schemathesis hooks for dapi (scripts/schemathesis.sh loads them).

Some of dapi's (CNAPI's) checks span several fields or need a regex engine, and cannot be
written in JSON Schema. Generated bodies that break them are dropped instead of being counted
as valid requests dapi refuses:
* `vm.ram` (each VM's, in a batch) must lie within `image.requirements.min_ram`/`max_ram`;
* the VMs of a batch (`vms`) have distinct `vm_uuid`s;
* a `re` affinity value must compile in XRegExp's dialect (tested by unit tests and the
  `affinity` fuzz target instead: bodies with one are dropped here).
"""

import schemathesis


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _vms(body):
    vms = [body.get("vm")]
    if isinstance(body.get("vms"), list):
        vms += body["vms"]
    return [vm for vm in vms if isinstance(vm, dict)]


def _distinct_batch_uuids(body):
    uuids = [vm.get("vm_uuid") for vm in body.get("vms") or [] if isinstance(vm, dict) and vm.get("vm_uuid")]
    return len(uuids) == len(set(map(str, uuids)))


def _no_regex_affinity(body):
    for vm in _vms(body):
        rules = vm.get("affinity")
        if isinstance(rules, list) and any(isinstance(r, dict) and r.get("valueType") == "re" for r in rules):
            return False
    return True


def _ram_within_requirements(body, vm):
    image = body.get("image") or body.get("img")
    if not isinstance(image, dict) or not isinstance(vm, dict):
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
        all(_ram_within_requirements(body, vm) for vm in _vms(body))
        and _distinct_batch_uuids(body)
        and _no_regex_affinity(body)
    )
