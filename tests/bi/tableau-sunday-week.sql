-- tool: Tableau, a week from Sunday (a date's day less its day of the week) under a date range filter
-- source: issue 33 item 4
-- identifiers: the demo's visits.visited_at
-- expect: answered
SELECT CAST((DATE_TRUNC('DAY', "visits"."visited_at") + (-EXTRACT(DOW FROM "visits"."visited_at") * INTERVAL '1 DAY')) AS DATE) AS "twk:visited_at:ok", COUNT(1) AS "cnt:visits:ok" FROM "public"."visits" "visits" WHERE (("visits"."visited_at" >= (TIMESTAMP '2024-01-07 00:00:00')) AND ("visits"."visited_at" < (TIMESTAMP '2024-03-03 00:00:00'))) GROUP BY 1
