#!/usr/bin/env python3
"""Validates custom resources against their CustomResourceDefinition's openAPIV3Schema, as
the API server would: unknown fields are refused wherever the schema lists an object's
properties without allowing others (additionalProperties or
x-kubernetes-preserve-unknown-fields), the strictness kubernetes-validate --strict applies to
the built-in kinds, which it cannot check for a CRD's kind. tests/deploy/run runs it on
deploy/kubernetes/'s PodMonitor with the operator's vendored CRD (tests/deploy/crd/), and
on tests/deploy/broken/'s PodMonitor, which it must refuse.
Usage: check_crd.py CRD.yaml MANIFEST.yaml...   exit 0 all valid, 1 errors (printed)"""
import sys

import jsonschema
import yaml


def strict(node):
    """The schema with additionalProperties: false where an object lists its properties."""
    if isinstance(node, dict):
        out = {k: strict(v) for k, v in node.items()}
        if "properties" in out and "additionalProperties" not in out and \
                not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [strict(v) for v in node]
    return node


def schemas(crd_path):
    """{(apiVersion, kind): schema} of the CRD's served versions."""
    with open(crd_path) as f:
        crd = yaml.safe_load(f)
    group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
    return {(f"{group}/{v['name']}", kind): strict(v["schema"]["openAPIV3Schema"])
            for v in crd["spec"]["versions"] if v.get("served")}


def main():
    known = schemas(sys.argv[1])
    errors, checked = 0, 0
    for path in sys.argv[2:]:
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        for doc in docs:
            schema = known.get((doc.get("apiVersion"), doc.get("kind")))
            if schema is None:
                continue
            checked += 1
            for e in jsonschema.Draft7Validator(schema).iter_errors(doc):
                print(f"{path}: {'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}")
                errors += 1
    if not checked:
        print(f"check_crd: no resource of {sorted(known)} in {sys.argv[2:]}")
        return 1
    print(f"check_crd: {checked} resource(s) checked, {errors} error(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
