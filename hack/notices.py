#!/usr/bin/env python3
"""THIRD-PARTY-NOTICES of the operator binary, from `cargo metadata` (docs/release.md).

    hack/notices.py TARGET [OUT]    write the notices of the crates the operator binary is built from on TARGET
                                    (x86_64-unknown-linux-musl, aarch64-unknown-linux-musl, ...) to OUT (default:
                                    standard output)

The crates are those `cargo metadata --filter-platform TARGET` resolves from the neuron-dra-operator package along
normal dependencies (what the binary links or expands: libraries and procedural macros; not build scripts' own
dependencies, not dev-dependencies). Each is listed with its version, licence expression and repository, and the
licence and notice files its package ships (LICENSE*, LICENCE*, COPYING*, NOTICE*, COPYRIGHT*, UNLICENSE and the
manifest's `license-file`) follow in full, each distinct text once with the crates that carry it. The output depends
only on Cargo.lock and the crates' sources: the same tree gives the same file. hack/release.sh puts it into each
image at /licenses/THIRD-PARTY-NOTICES (beside the project's LICENSE), the Dockerfile's `source` stage writes it
too, and tests/release.rs checks it against the dependency list cargo-auditable embeds in the binary.
"""

import hashlib
import json
import os
import re
import subprocess
import sys

ROOT = "neuron-dra-operator"
LICENCE_FILE = re.compile(r"^(licen[cs]e|copying|notice|copyright|unlicense)([-._].*)?$", re.IGNORECASE)


def metadata(target):
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run(
        ["cargo", "metadata", "--locked", "--format-version", "1", "--filter-platform", target],
        cwd=repo, check=True, stdout=subprocess.PIPE)
    return json.loads(out.stdout)


def shipped(meta):
    """The packages reachable from the operator along normal dependency edges, the operator excluded."""
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    root = next(p["id"] for p in meta["packages"] if p["name"] == ROOT and p["source"] is None)
    seen, todo = {root}, [root]
    while todo:
        for dep in nodes[todo.pop()]["deps"]:
            normal = any(kind["kind"] is None for kind in dep["dep_kinds"])
            if normal and dep["pkg"] not in seen:
                seen.add(dep["pkg"])
                todo.append(dep["pkg"])
    seen.discard(root)
    return sorted((packages[i] for i in seen), key=lambda p: (p["name"], version_key(p["version"])))


def version_key(version):
    return [int(part) if part.isdigit() else part for part in re.split(r"[.+-]", version)]


def licence_files(package):
    directory = os.path.dirname(package["manifest_path"])
    names = sorted(n for n in os.listdir(directory) if LICENCE_FILE.match(n) and os.path.isfile(os.path.join(directory, n)))
    if package.get("license_file"):
        extra = os.path.normpath(package["license_file"])
        if extra not in names and os.path.isfile(os.path.join(directory, extra)):
            names.append(extra)
    for name in names:
        with open(os.path.join(directory, name), "rb") as f:
            yield name, f.read().decode("utf-8", errors="replace").replace("\r\n", "\n").rstrip() + "\n"


def notices(meta, target):
    crates = shipped(meta)
    version = next(p["version"] for p in meta["packages"] if p["name"] == ROOT and p["source"] is None)
    lines = [
        f"THIRD-PARTY NOTICES of {ROOT} {version} ({target})",
        "",
        f"{ROOT} is licensed under Apache-2.0 (/licenses/LICENSE in the image). Its binary is built from the",
        f"{len(crates)} crates below, each under the licence its authors chose; their licence and notice files follow",
        "in full. Generated from `cargo metadata` by hack/notices.py.",
        "",
        "CRATES (name version licence repository)",
        "",
    ]
    texts = {}
    for package in crates:
        licence = package.get("license") or "see its licence file"
        lines.append(f"{package['name']} {package['version']} ({licence}) {package.get('repository') or '-'}")
        for name, text in licence_files(package):
            digest = hashlib.sha256(text.encode()).hexdigest()
            texts.setdefault(digest, (text, []))[1].append(f"{package['name']} {package['version']} {name}")
    missing = [p for p in crates if not any(True for _ in licence_files(p))]
    if missing:
        lines += ["", "Crates that ship no licence file (their licence is the SPDX expression above):"]
        lines += [f"  {p['name']} {p['version']} ({p.get('license')})" for p in missing]
    lines += ["", "LICENCE AND NOTICE TEXTS", ""]
    for text, carriers in sorted(texts.values(), key=lambda entry: entry[1][0]):
        lines.append("=" * 100)
        lines += [f"{carrier}" for carrier in carriers]
        lines.append("-" * 100)
        lines.append(text)
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    text = notices(metadata(sys.argv[1]), sys.argv[1])
    if len(sys.argv) == 3:
        with open(sys.argv[2], "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
