"""300 people with an age and two public keys (region, sex): the grouping-sets tests and
the consistency of their counts share them."""

from __future__ import annotations

import numpy as np

from tests.factories import Table

REGIONS, SEXES = ["north", "south", "east", "west"], ["f", "m"]
RULES = f"""
[defaults]
epsilon_per_query = 0.5
budget_per_analyst = 1000

[analysts.zoe]

[tables.people]
privacy_unit = "person_id"
max_rows_per_unit = 1
[tables.people.columns]
person_id = {{ type = "int" }}
age = {{ type = "int", domain = [0, 120] }}
region = {{ type = "text", keys = {REGIONS!r} }}
sex = {{ type = "text", keys = {SEXES!r} }}
""".replace("'", '"')


def people() -> Table:
    rng = np.random.default_rng(3)
    n = 300
    return Table({"person_id": list(range(n)), "age": [int(a) for a in rng.integers(0, 100, n)],
                  "region": [str(r) for r in rng.choice(REGIONS, n)],
                  "sex": [str(s) for s in rng.choice(SEXES, n)]},
                 {"person_id": "INTEGER", "age": "INTEGER", "region": "TEXT", "sex": "TEXT"})
