"""The closed loop's summary pieces (``harness.closedloop.summary_md``): the spread of each load's
errors over the repeats, the other calibration rules on the same blocks, the calibration line."""
from __future__ import annotations

from harness.closedloop_meter import RESCALED


def spread(loads: list[dict], within_pct: float) -> list[str]:
    """Per load: each repeat's E2E and TPOT error, their range, whether every repeat is within
    ``within_pct``, and the machine load over that load's blocks."""
    out = [f"Spread over repeats (error %, simulated vs measured; target: within {within_pct:g}% in every repeat):",
           "", "| load | metric | per repeat | min | max | every repeat within |",  "|---|---|---|---|---|---|"]
    for load in dict.fromkeys(ld["load"] for ld in loads):
        mine = sorted((ld for ld in loads if ld["load"] == load), key=lambda ld: ld.get("repeat", 0))
        for m, name in (("e2e_mean_s", "E2E mean"), ("tpot_mean_s", "TPOT mean"), ("ttft_mean_s", "TTFT mean")):
            e = [ld["error_pct"][m] for ld in mine if ld["error_pct"][m] is not None]
            if not e:
                continue
            ok = "yes" if all(abs(x) <= within_pct for x in e) else "no"
            out.append(f"| {load:g} | {name} | {', '.join(f'{x:+.1f}' for x in e)} | {min(e):+.1f} | {max(e):+.1f} | "
                       f"{ok if m != 'ttft_mean_s' else '(not a target)'} |")
    blocks = [b for ld in loads for b in ld.get("blocks", [])]
    if blocks:
        la = [x for b in blocks for x in b["machine_loadavg_1m"]]
        out += ["", f"{len(blocks)} replay blocks, overhead probes re-taken before each (serving overheads from: "
                f"{loads[0].get('calibrated_from', 'probe')}): machine load average "
                f"(1 min) {min(la):.1f}-{max(la):.1f} over the blocks (per block in closed_loop.json)."]
    return out


def other_rules(loads: list[dict]) -> list[str]:
    """The same blocks simulated under the calibration rules the run did not judge (for comparison)."""
    rules = list(dict.fromkeys(r for ld in loads for r in ld.get("other_rules", {})))
    if not rules:
        return []
    out = ["", f"The same blocks under the other calibration rules (the run judges `{loads[0]['calibrated_from']}`; "
           f"error % per repeat, for comparison only; `{RESCALED}`: known only after the block, how much the "
           "machine's other jobs explain):", "", "| load | rule | E2E per repeat | TPOT per repeat |",
           "|---|---|---|---|"]
    for load in dict.fromkeys(ld["load"] for ld in loads):
        mine = sorted((ld for ld in loads if ld["load"] == load), key=lambda ld: ld.get("repeat", 0))
        for r in rules:
            e = [[ld["other_rules"][r]["error_pct"][m] for ld in mine] for m in ("e2e_mean_s", "tpot_mean_s")]
            out.append(f"| {load:g} | {r} | " + " | ".join(", ".join(f"{x:+.1f}" for x in v) for v in e) + " |")
    return out


def cal_text(cal: dict) -> str:
    if cal.get("fitted") is None:
        return f"not fitted ({cal.get('note')})"
    return (f"calibration TTFT MAPE {cal['ttft_s_mape_pct_before']:.1f}% -> {cal['ttft_s_mape_pct_after']:.1f}%, "
            f"TPOT {cal['tpot_s_mape_pct_before']:.1f}% -> {cal['tpot_s_mape_pct_after']:.1f}% ({cal['rows']} rows)")
