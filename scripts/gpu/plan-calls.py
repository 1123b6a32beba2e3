#!/usr/bin/env python3
"""Plan the device calls for the H200 (scripts/gpu/README.md): what each call carries, how big it is, and
the exact command, so that no call is over the 64 MiB the device tool carries.

A call carries the working tree as the tool copies it (tracked files plus untracked files git does not
ignore, and a shared/ folder inside the checkout) plus its `carry` paths. The kit folders (.devkit/cN,
scripts/gpu/build-kit.sh) are ~60 MiB each, so during staging the committed stores
(results/*/*/results.sqlite*, several MiB) must be out of the tree; `--hold` moves them into .devkit/held/
(ignored, so it does not travel); `--restore` puts back what the run calls need (the planned campaigns'
reference runs, results/*/NAME; the rest stays held: the whole of results/ is over what one call carries) and
`--restore-all` everything, before a commit. A benchmark call runs with the tree as staged.
The payload files (.devkit/payload, scripts/gpu/pack-payload.sh) go into the spare room of the kit calls,
then into calls of their own; this script writes each call's share as hard links in .devkit/pNN.

usage: python3 scripts/gpu/plan-calls.py [CONFIG[:CALLS] ...] [--json PLAN.json]
       python3 scripts/gpu/plan-calls.py [CONFIG[:CALLS] ...] --hold | --restore | --restore-all
(default: configs/gpu-llama8b.yaml, one run call, then configs/gpu-smollm2.yaml, three: see README.md)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

MiB = 2 ** 20
LIMIT = 64 * MiB  # the working tree that travels plus carried paths (/work/.library/device/README.md)
MARGIN = 1 * MiB  # room for files that change between planning and calling (others commit meanwhile)
CALL_S, GRACE_S, OVERHEAD_S = 600, 20, 30  # a command's limit; qeval's SIGINT grace; tarball and start
MAX_CARRY, MAX_COMMAND = 8, 2000
# device seconds, from the calls of 2026-11-30 (scripts/gpu/README.md): a fresh machine's start, one
# staging call, the kit's install.sh, device-setup.sh (GGUF conversion, random 8B model)
START_S, STAGE_S, INSTALL_S, SETUP_S = 60, 10, 75, 60
SESSION_S = 30 * 60  # a developer session's device time
ROOT = Path(__file__).resolve().parents[2]
KIT, PAYLOAD, HELD = ROOT / ".devkit", ROOT / ".devkit" / "payload", ROOT / ".devkit" / "held"
STORES = re.compile(r"^results/[^/]+/[^/]+/results\.sqlite")


def die(msg: str) -> None:
    print(f"plan-calls: {msg}", file=sys.stderr)
    raise SystemExit(2)


def tree_files() -> dict[str, int]:
    """What the device tool copies of the checkout: tracked + untracked-not-ignored files (+ shared/)."""
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         capture_output=True, check=True).stdout.decode()
    files = {}
    for rel in filter(None, out.split("\0")):
        p = ROOT / rel
        if p.is_symlink() or p.is_file():  # a tracked file deleted (or held) here does not travel
            files[rel] = p.lstat().st_size
    shared = ROOT / "shared"
    if shared.is_dir():
        files.update({str(p.relative_to(ROOT)): p.lstat().st_size for p in shared.rglob("*") if p.is_file()})
    return files


def du(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() or p.is_symlink())


def mib(n: int) -> str:
    return f"{n / MiB:.1f}"


def held_files() -> list[Path]:
    return sorted(p for p in HELD.rglob("*") if p.is_file()) if HELD.is_dir() else []


def hold_list(files: dict[str, int], biggest_kit: int) -> list[str]:
    """The committed stores, then other results/ files by size, until the biggest kit call fits."""
    stores = [f for f in files if STORES.match(f)]
    rest = sorted((f for f in files if f.startswith("results/") and f not in stores), key=lambda f: -files[f])
    held, size = list(stores), sum(files.values()) - sum(files[f] for f in stores)
    for f in rest:
        if size + biggest_kit <= LIMIT - MARGIN:
            break
        held.append(f)
        size -= files[f]
    if size + biggest_kit > LIMIT - MARGIN:
        big = sorted(files, key=lambda f: -files[f])[:5]
        die(f"the tree is {mib(size)} MiB even without results/: over the limit with a {mib(biggest_kit)} MiB kit "
            f"folder; largest files: " + ", ".join(f"{f} ({mib(files[f])} MiB)" for f in big))
    return held


def kit_folders() -> list[Path]:
    found = sorted((p for p in KIT.glob("c*") if re.fullmatch(r"c\d+", p.name)), key=lambda p: int(p.name[1:]))
    if not found:
        die(f"no kit folders in {KIT}: run `bash scripts/gpu/build-kit.sh` first")
    return found


def payload_files() -> dict[str, int]:
    if not (PAYLOAD / "payload.sha256").is_file():
        die(f"no payload in {PAYLOAD}: run `bash scripts/gpu/pack-payload.sh` first")
    return {p.name: p.stat().st_size for p in PAYLOAD.iterdir() if p.is_file()}


def plan(campaigns: list[tuple[str, int]], write: bool) -> dict:
    files = tree_files()
    # files already held by --hold are still part of the full tree the run calls carry
    for p in held_files():
        files.setdefault(str(p.relative_to(HELD)), p.stat().st_size)
    full = sum(files.values())
    kits = kit_folders()
    kit_size = {k.name: du(k) for k in kits}
    held = hold_list(files, max(kit_size.values()))
    slim = full - sum(files[f] for f in held)
    pay = payload_files()
    calls: list[dict] = [{"kit": k.name, "payload": [], "size": kit_size[k.name]} for k in kits]
    for name in sorted(pay, key=lambda n: -pay[n]):  # first fit, biggest first
        if pay[name] + slim > LIMIT - MARGIN:
            die(f"payload file {name} ({mib(pay[name])} MiB) does not fit any call beside a {mib(slim)} MiB tree")
        home = next((c for c in calls if c["size"] + pay[name] + slim <= LIMIT - MARGIN), None)
        if home is None:
            home = {"kit": None, "payload": [], "size": 0}
            calls.append(home)
        home["payload"].append(name)
        home["size"] += pay[name]
    if write:
        for old in KIT.glob("p*"):
            if re.fullmatch(r"p\d+", old.name):
                shutil.rmtree(old)
    rows = []
    for i, c in enumerate(calls, 1):
        carry, cmd = [], []
        if c["kit"]:
            carry.append(f".devkit/{c['kit']}")
            cmd.append(f"bash .devkit/{c['kit']}/stage.sh .devkit/{c['kit']}")
        else:  # no stage.sh here: say when the machine was recycled since the kit calls
            cmd.append("{ [ -f /tmp/kit/.staged ] || "
                       "echo 'WARNING: /tmp/kit is empty: machine recycled, start at call 1'; }")
        if c["payload"]:
            pdir = f".devkit/p{i:02d}"
            carry.append(pdir)
            cmd.append(f"mkdir -p /tmp/payload && cp {pdir}/* /tmp/payload/ "
                       "&& echo payload: $(ls /tmp/payload | wc -l) files")
            if write:
                (ROOT / pdir).mkdir(parents=True)
                for name in c["payload"]:
                    try:
                        os.link(PAYLOAD / name, ROOT / pdir / name)
                    except OSError:
                        shutil.copy2(PAYLOAD / name, ROOT / pdir / name)
        est = (START_S if i == 1 else 0) + STAGE_S
        if i == len(calls):
            cmd += ["bash /tmp/kit/install.sh", "bash scripts/gpu/device-setup.sh"]
            est += INSTALL_S + SETUP_S
        rows.append({"call": i, "phase": "stage", "carry": carry, "carry_mib": round(c["size"] / MiB, 2),
                     "tree_mib": round(slim / MiB, 2), "total_mib": round((c["size"] + slim) / MiB, 2),
                     "est_device_s": est, "command": " && ".join(cmd)})
    budget = CALL_S - GRACE_S - OVERHEAD_S
    for cfg, _ in campaigns:
        if not (ROOT / cfg).is_file():
            die(f"no campaign file {cfg}")
    # a run call needs only its campaigns' reference runs (results/*/NAME, device-run.sh); the other held
    # files stay out, as results/ grows past what one call carries
    names = {campaign_name(ROOT / cfg) for cfg, _ in campaigns}
    keep = [f for f in held if len(f.split("/")) > 3 and f.split("/")[2] in names]
    run_held = [f for f in held if f not in keep]
    run_tree = full - sum(files[f] for f in run_held)
    if campaigns and run_tree > LIMIT - MARGIN:
        big = sorted((f for f in files if f.startswith("results/") and f not in run_held), key=lambda f: -files[f])[:5]
        die(f"the run calls' tree is {mib(run_tree)} MiB with {', '.join(sorted(names))}'s reference runs: over "
            "the limit; move out other results, e.g. " + ", ".join(f"{f} ({mib(files[f])} MiB)" for f in big))
    for cfg, n in campaigns:
        for k in range(n):
            rows.append({"call": len(rows) + 1, "phase": "run", "carry": [], "carry_mib": 0.0,
                         "tree_mib": round(run_tree / MiB, 2), "total_mib": round(run_tree / MiB, 2),
                         "est_device_s": budget + GRACE_S + OVERHEAD_S,
                         "command": f"bash scripts/gpu/device-run.sh {cfg} {budget}"})
    for r in rows:
        assert len(r["carry"]) <= MAX_CARRY and len(r["command"]) <= MAX_COMMAND, r
        assert r["total_mib"] * MiB <= LIMIT - MARGIN, r
    return {"limit_mib": LIMIT / MiB, "margin_mib": MARGIN / MiB, "tree_full_mib": round(full / MiB, 2),
            "tree_staging_mib": round(slim / MiB, 2), "hold": held, "restore": keep, "calls": rows,
            "campaigns": campaigns,
            "timeout_s": CALL_S, "run_budget_s": budget, "grace_s": GRACE_S}


def hold(p: dict) -> None:
    for rel in p["hold"]:
        src, dst = ROOT / rel, HELD / rel
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            src.replace(dst)
    print(f"held {len(held_files())} files in {HELD.relative_to(ROOT)}; tree now {mib(sum(tree_files().values()))} MiB")


def campaign_name(cfg: Path) -> str:
    # the top-level `name:` (no YAML parser: this runs with any python3)
    m = re.search(r"^name:\s*['\"]?([^'\"\s#]+)", cfg.read_text(), re.M)
    if not m:
        die(f"{cfg}: no top-level `name:`")
    return m.group(1)


def restore(only: list[str] | None = None) -> None:
    """Put the held files back: all of them, or `only` (what the run calls need); the rest stay held."""
    back = [p for p in held_files() if only is None or str(p.relative_to(HELD)) in only]
    for src in back:
        dst = ROOT / src.relative_to(HELD)
        if dst.exists():
            die(f"{dst.relative_to(ROOT)} exists again: compare it with {src.relative_to(ROOT)} and keep one")
        dst.parent.mkdir(parents=True, exist_ok=True)
        src.replace(dst)
    left = held_files()
    if not left:
        shutil.rmtree(HELD, ignore_errors=True)
    print(f"restored {len(back)} files; tree now {mib(sum(tree_files().values()))} MiB"
          + (f"; {len(left)} still held (`--restore-all` before any commit)" if left else ""))


def show(p: dict) -> None:
    print(f"limit {p['limit_mib']:.0f} MiB a call (planned with {p['margin_mib']:.0f} MiB to spare); tree "
          f"{p['tree_full_mib']:.1f} MiB, {p['tree_staging_mib']:.1f} MiB while these are held out "
          f"({len(p['hold'])} files, `--hold`): " + ", ".join(p["hold"][:4]) + (" ..." if len(p["hold"]) > 4 else ""))
    print()
    print("| call | carry | carried MiB | + tree MiB | = MiB | device s (est.) | command |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    stage_end = max(r["call"] for r in p["calls"] if r["phase"] == "stage")
    print("| - | - | | | | | here: `python3 scripts/gpu/plan-calls.py --hold` |")
    for r in p["calls"]:
        carry = json.dumps(r["carry"]) if r["carry"] else "-"
        print(f"| {r['call']} | `{carry}` | {r['carry_mib']:.1f} | {r['tree_mib']:.1f} | {r['total_mib']:.1f} | "
              f"{'<= ' if r['phase'] == 'run' else '~'}{r['est_device_s']} | `{r['command']}` |")
        if r["call"] == stage_end:
            args = " ".join(f"{c}:{n}" for c, n in p["campaigns"])
            print(f"| - | - | | | | | here: `python3 scripts/gpu/plan-calls.py {args} --restore` |")
    stage = sum(r["est_device_s"] for r in p["calls"] if r["phase"] == "stage")
    run = sum(r["est_device_s"] for r in p["calls"] if r["phase"] == "run")
    print(f"\nstaging ~{stage} s of device time, run calls at most {run} s (each: qeval gets SIGINT at "
          f"{p['run_budget_s']} s and {p['grace_s']} s to write its record; the call's timeout_s: {p['timeout_s']}). "
          "Calls back to back: the machine forgets /tmp 30 s after a call.")
    if stage + run > SESSION_S:
        print(f"NOTE: {stage + run} s is more than a session's {SESSION_S} s of device time (and a machine's 30 min): "
              "give the last run call that fits a budget that ends it in time (device-run.sh CONFIG SECONDS, "
              "SECONDS = device time left - 60), so its tarball comes back; the next session resumes from it")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("campaigns", nargs="*", default=["configs/gpu-llama8b.yaml", "configs/gpu-smollm2.yaml:3"],
                    help="CONFIG[:CALLS]: a campaign to run after staging, and how many run calls to plan for it")
    ap.add_argument("--json", type=Path, help="also write the plan here")
    act = ap.add_mutually_exclusive_group()
    act.add_argument("--hold", action="store_true", help="move the files the staging calls must not carry out")
    act.add_argument("--restore", action="store_true",
                     help="put back what the run calls of these campaigns need (their reference runs)")
    act.add_argument("--restore-all", action="store_true", help="put every held file back (before a commit)")
    a = ap.parse_args()
    if a.restore_all:
        return restore()
    campaigns = []
    for c in a.campaigns:
        cfg, _, n = c.partition(":")
        if n and not n.isdigit():
            die(f"{c}: CALLS after ':' must be a number")
        campaigns.append((cfg, int(n or 1)))
    p = plan(campaigns, write=not (a.hold or a.restore))
    if a.restore:
        return restore(p["restore"])
    if a.hold:
        return hold(p)
    show(p)
    if a.json:
        a.json.write_text(json.dumps(p, indent=1) + "\n")


if __name__ == "__main__":
    main()
