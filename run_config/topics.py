"""The topics of docs/configuration.md: a title and one sentence each, in the page's order.

Each key says its topic (`Key.topic`, or else the topic of its group in GROUP_TOPICS) and is
listed there in the order of `run_config.schema.KEYS`: the app's keys, then the methods' own. A
key whose topic is not here is listed under "Other" (the page still builds).
"""

from __future__ import annotations

from collections.abc import Iterable

from methods.settings import Key

TOPICS: tuple[tuple[str, str], ...] = (
    ("Method",
     "The method and the server update ([algorithms](algorithms.md#server-round)); `setup` "
     "picks a paper set-up ([set-ups](setups.md))."),
    ("Baselines",
     "The knobs of the baselines the papers compare with ([baselines](baselines.md))."),
    ("Local training",
     "The clients' optimizer ([local update](algorithms.md#local-update))."),
    ("Data and model",
     "Dataset, client split, augmentation and model ([data](data.md))."),
    ("Server",
     "Rounds, client sampling, seeds and the dynamic client population."),
    ("Reliability",
     "What the server does with late, failed or bad replies ([results](results.md))."),
    ("Robustness",
     "How far one client can move the model: outlier and weight caps, robust aggregators and "
     "server-side differential privacy ([security](security.md))."),
    ("Outputs",
     "Evaluation, the summary's numbers, run folders, checkpoints and resume "
     "([results](results.md), [reporting](algorithms.md#reporting))."),
)
# The topic of a key that names none (`Key.topic` = ''): its group's.
GROUP_TOPICS = {"server": "Method", "client": "Local training", "data": "Data and model",
                "model": "Data and model", "federation": "Server", "robustness": "Robustness",
                "output": "Outputs"}
OTHER = ("Other", "Keys whose topic is not one of `run_config/topics.py`.")


def topic_of(key: Key) -> str:
    return key.topic or GROUP_TOPICS.get(key.group, OTHER[0])


def grouped(keys: Iterable[Key]) -> list[tuple[str, str, list[str]]]:
    """(title, sentence, key names) per topic that has keys, in TOPICS order, each topic's keys
    in the order given; keys of an unknown topic under Other."""
    keys = list(keys)
    titles = [title for title, _ in TOPICS]
    out = []
    for title, sentence in (*TOPICS, OTHER):
        names = [k.name for k in keys if topic_of(k) == title
                 or title == OTHER[0] and topic_of(k) not in titles]
        if names:
            out.append((title, sentence, names))
    return out
