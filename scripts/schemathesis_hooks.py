"""Schemathesis hooks for dapi (scripts/schemathesis.sh loads them).

One rule of dapi's (CNAPI's) checks spans two fields and cannot be written in JSON Schema:
`vm.ram` must lie within `image.requirements.min_ram`/`max_ram`. Generated bodies that break
it are dropped instead of being counted as valid requests dapi refuses.
"""

import schemathesis


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _ram_within_requirements(body):
    if not isinstance(body, dict):
        return True
    image = body.get("image") or body.get("img")
    vm = body.get("vm")
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
    return _ram_within_requirements(body)
