-- tool: Lightdash, explore with a table calculation: percent of total unique people by region
-- chart: table
-- keys: 1
-- why: a window over the metrics CTE (post-processing)
-- expect: answered
WITH metrics AS (
SELECT
  "people".region AS "people_region",
  COUNT(DISTINCT "people".person_id) AS "people_unique_people"
FROM "public"."people" AS "people"
GROUP BY 1
),
table_calculations AS (
SELECT
  *,
  "people_unique_people" / SUM("people_unique_people") OVER () AS "percent_of_total"
FROM metrics
)
SELECT
  *
FROM table_calculations
ORDER BY "people_unique_people" DESC
LIMIT 500
