-- tool: Grafana, PostgreSQL data source, code editor (a Time series panel): $__timeGroupAlias(visited_at,
--   1d) with $__unixEpochFilter over the column's epoch, as Grafana expands them before sending
--   (macros.go: floor(extract(epoch from col)/86400)*86400 AS "time"; "%s >= %d AND %s <= %d")
-- identifiers: the demo's visits.visited_at, the first quarter of 2024 in epoch seconds
-- source: written from macros.go's expansion (Grafana not run); refused until 2026-11-29; the
--   epoch bounds narrow the day bins as a moment range does (91 keys, not the domain's 731)
-- expect: answered
SELECT
  floor(extract(epoch from "visited_at")/86400)*86400 AS "time",
  count(*) AS "visits"
FROM visits
WHERE extract(epoch from "visited_at") >= 1704067200 AND extract(epoch from "visited_at") <= 1711929599
GROUP BY 1
ORDER BY 1
