-- tool: Looker with the query time zone America/New_York: the converted column in WHERE and DATE(), across the clock change of 2024-03-10
-- source: the BI probe of 2026-11-28 (wall-clock filters)
-- identifiers: the demo's visits.visited_at
-- expect: answered
SELECT
    DATE((visits.visited_at  AT TIME ZONE 'UTC' AT TIME ZONE 'America/New_York')) AS "visits.visited_date",
    COUNT(*) AS "visits.count"
FROM public.visits  AS visits
WHERE (((visits.visited_at  AT TIME ZONE 'UTC' AT TIME ZONE 'America/New_York')) >= ((TIMESTAMP '2024-03-08')) AND ((visits.visited_at  AT TIME ZONE 'UTC' AT TIME ZONE 'America/New_York')) < ((TIMESTAMP '2024-03-13')))
GROUP BY
    1
ORDER BY
    1
LIMIT 500
