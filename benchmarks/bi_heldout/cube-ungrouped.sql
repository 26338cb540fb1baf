-- tool: Cube, /load with ungrouped: true (person_id, cost)
-- chart: table (raw)
-- why: ungrouped rows: must be refused
-- expect: refused 42501
SELECT
      "visits".person_id "visits__person_id", "visits".cost "visits__cost"
    FROM
      public.visits AS "visits"  LIMIT 10000
