"""A schedule of layouts by step, as text: "0:dp=2,zero=0;6:tp=2;12:dp=2,zero=2" (the CLI
trainer's --schedule, docs/cli.md). parse_schedule() is a plain function and an argparse type:

    ap.add_argument("--schedule", type=dynatrain.parse_schedule, default="0:dp=2;6:tp=2")
    job = dynatrain.adopt(model, optimizer, plan, a.schedule.pop(0))
    ...
        if step in a.schedule: job.switch(a.schedule[step])
"""
from __future__ import annotations

import argparse
from typing import Dict

from . import _native


class ScheduleError(ValueError, argparse.ArgumentTypeError):
    """A schedule that does not parse: a ValueError, whose message argparse prints as it is."""


def parse_schedule(text: str) -> Dict[int, str]:
    """{step: layout} from "STEP:LAYOUT;STEP:LAYOUT;...": steps distinct whole numbers >= 0, each
    layout a config that parses (ScheduleError naming the bad entry otherwise). Ordered by step."""
    schedule: Dict[int, str] = {}
    for item in (part.strip() for part in str(text).split(";")):
        step, sep, layout = item.partition(":")
        if not sep or not step.strip().isdigit() or not layout.strip():
            raise ScheduleError(f"schedule entry {item!r}: want STEP:LAYOUT (e.g. 6:tp=2,dp=2), steps whole numbers >= 0")
        if int(step) in schedule:
            raise ScheduleError(f"schedule entry {item!r}: step {int(step)} is given twice")
        try:
            _native.world_size_of(layout.strip())
        except ValueError as e:
            raise ScheduleError(f"schedule entry {item!r}: {e}") from None
        schedule[int(step)] = layout.strip()
    return dict(sorted(schedule.items()))
