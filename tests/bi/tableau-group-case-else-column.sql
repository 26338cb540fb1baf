-- tool: Tableau, a group (Region (group)): CASE … ELSE the column
-- source: the BI probe of 2026-11-28 (derived keys)
-- identifiers: the demo's people.region and income
-- expect: answered
SELECT (CASE WHEN ("people"."region" IN ('north', 'south')) THEN 'north & south' ELSE "people"."region" END) AS "Region (group)", AVG(CAST("people"."income" AS DOUBLE PRECISION)) AS "avg:income:ok" FROM "public"."people" "people" GROUP BY 1
