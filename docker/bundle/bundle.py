"""The offline bundle's bookkeeping, for docker/wheelhouse.sh (building) and docker/build-venv.sh
(installing; a copy travels in the bundle). Standard library only, plus pip's own ``packaging``.

  bundle.py requirements WHEEL EXTRAS PYTHON PROFILE OUT   what pip must bring for the project
  bundle.py keep DOWNLOADED PROFILE WHEELS                 moves the wheels the host does not have
  bundle.py manifest BUNDLE LIMIT_MIB TREE_BYTES           bundle.json, the size report, the limit
  bundle.py check BUNDLE                                    run by the installed Python: the host's part
"""

from __future__ import annotations

import email.parser
import json
import platform
import sys
import zipfile
from pathlib import Path

try:
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version
except ImportError:  # a bare interpreter: pip's vendored copy
    from pip._vendor.packaging.markers import default_environment  # type: ignore[no-redef]
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef]
    from pip._vendor.packaging.utils import canonicalize_name  # type: ignore[no-redef]
    from pip._vendor.packaging.version import Version  # type: ignore[no-redef]

MIB = 2**20


def read_profile(path: Path) -> tuple[set[str], set[str]]:
    """(names the host has, names left out although the host may lack them)."""
    host: set[str] = set()
    optional: set[str] = set()
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        if words[0] == "optional" and len(words) == 2:
            optional.add(canonicalize_name(words[1]))
        elif len(words) == 1:
            host.add(canonicalize_name(words[0]))
        else:
            raise SystemExit(f"{path}: cannot read the line {raw!r}")
    return host, optional


def project_requirements(wheel: Path, extras: list[str], python: str) -> list[Requirement]:
    """The project's own requirements for ``extras`` on a Linux x86_64 host with ``python``."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = email.parser.Parser().parsestr(archive.read(name).decode())
    environment = {
        **default_environment(),
        "python_version": python,
        "python_full_version": f"{python}.0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
    }
    found: list[Requirement] = []
    for text in metadata.get_all("Requires-Dist") or []:
        requirement = Requirement(text)
        if requirement.marker is None or any(
            requirement.marker.evaluate({**environment, "extra": extra}) for extra in ["", *extras]
        ):
            requirement.marker = None
            found.append(requirement)
    return found


def cmd_requirements(wheel: str, extras: str, python: str, profile: str, out: str) -> None:
    """Write what pip must download (the project's requirements less those left to the host) to
    OUT, and the left-out ones with their specifiers to OUT.left.json."""
    host, optional = read_profile(Path(profile))
    wanted, left = [], []
    for requirement in project_requirements(Path(wheel), [e for e in extras.split(",") if e], python):
        name = canonicalize_name(requirement.name)
        if name in host or name in optional:
            left.append({"name": name, "specifier": str(requirement.specifier), "optional": name in optional})
        else:
            wanted.append(str(requirement))
    Path(out).write_text("".join(f"{line}\n" for line in wanted))
    Path(f"{out}.left.json").write_text(
        json.dumps({"host": sorted(host), "optional": sorted(optional), "left": left})
    )


def wheel_name(path: Path) -> tuple[str, str]:
    """(canonical name, version) of a wheel file."""
    parts = path.name.split("-")
    return canonicalize_name(parts[0]), parts[1]


def cmd_keep(downloaded: str, profile: str, wheels: str) -> None:
    """Move the downloaded wheels into WHEELS, less those of packages left to the host (pip brings
    them as the needs of what the bundle carries: numpy for diffusers, say)."""
    host, optional = read_profile(Path(profile))
    dropped = []
    for wheel in sorted(Path(downloaded).glob("*.whl")):
        name = wheel_name(wheel)[0]
        if name in host or name in optional:
            dropped.append(name)
            continue
        wheel.rename(Path(wheels) / wheel.name)
    if dropped:
        print(f"left to the host, though pulled in as needs: {', '.join(dropped)}")


def cmd_manifest(bundle: str, limit_mib: str, tree_bytes: str) -> None:
    """bundle.json and a size report; exits 1 when the bundle and the tree it travels with are
    over the limit."""
    root = Path(bundle)
    meta = json.loads((root / "build.json").read_text())
    wheels = sorted((root / "wheels").glob("*.whl"))
    parts = {
        "wheels": sum(w.stat().st_size for w in wheels),
        "tools": (root / "tools.tar.xz").stat().st_size,
        "install": sum(p.stat().st_size for p in root.iterdir() if p.is_file() and p.name != "tools.tar.xz"),
    }
    total = sum(parts.values())
    tree = int(tree_bytes)
    manifest = {
        **meta,
        "wheels": [
            {"name": wheel_name(w)[0], "version": wheel_name(w)[1], "file": w.name, "bytes": w.stat().st_size}
            for w in wheels
        ],
        "bytes": {**parts, "bundle": total, "tree": tree, "together": total + tree},
        "limit_mib": float(limit_mib),
    }
    (root / "bundle.json").write_text(json.dumps(manifest, indent=1))
    biggest = sorted(manifest["wheels"], key=lambda w: -w["bytes"])[:6]
    print(f"bundle {root} for Python {meta['python']} ({meta['platform']}), extras {meta['extras']}:")
    print(f"  wheels   {parts['wheels'] / MIB:6.1f} MiB  {len(wheels)} wheels; largest:")
    for w in biggest:
        print(f"             {w['bytes'] / MIB:6.1f} MiB  {w['name']} {w['version']}")
    print(f"  tools    {parts['tools'] / MIB:6.1f} MiB  ffmpeg + ffprobe ({meta['ffmpeg']}), xz")
    print(f"  install  {parts['install'] / MIB:6.2f} MiB  install.sh, bundle.py, manifests")
    print(
        f"  bundle   {total / MIB:6.1f} MiB; with the repository's files ({tree / MIB:.1f} MiB) "
        f"{(total + tree) / MIB:.1f} MiB of {float(limit_mib):g} MiB"
    )
    print(f"  left to the host: {', '.join(sorted(meta['left_names']))}")
    if total + tree > float(limit_mib) * MIB:
        print(f"bundle: over the limit of {float(limit_mib):g} MiB", file=sys.stderr)
        raise SystemExit(1)


def cmd_check(bundle: str) -> None:
    """Run by the installed Python: every requirement the bundle left to the host is there in a
    version that satisfies it (optional ones are only reported)."""
    import importlib.metadata as md

    meta = json.loads((Path(bundle) / "bundle.json").read_text())
    if meta["python"] != "{}.{}".format(*sys.version_info[:2]):
        raise SystemExit(
            f"install: the bundle is for Python {meta['python']}, this is {platform.python_version()}"
        )
    problems, notes = [], []
    for entry in meta["left"]:
        try:
            have = md.version(entry["name"])
        except md.PackageNotFoundError:
            have = None
        spec = Requirement(f"{entry['name']}{entry['specifier']}").specifier
        if have is not None and spec.contains(Version(have), prereleases=True):
            notes.append(f"{entry['name']} {have}")
        elif entry["optional"]:
            notes.append(f"{entry['name']} absent (optional)")
        else:
            wanted = f"{entry['name']}{entry['specifier']}"
            problems.append(f"{wanted}: {'not installed' if have is None else f'the host has {have}'}")
    print("install: from the host: " + ", ".join(notes))
    if problems:
        raise SystemExit(
            "install: the bundle leaves these to the host, which cannot provide them: "
            + "; ".join(problems)
            + ". Install them on the host, or build the bundle with a host profile that does not list them."
        )


if __name__ == "__main__":
    commands = {
        "requirements": cmd_requirements,
        "keep": cmd_keep,
        "manifest": cmd_manifest,
        "check": cmd_check,
    }
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        raise SystemExit(__doc__)
    commands[sys.argv[1]](*sys.argv[2:])
