-- tool: Tableau, AVG([Days]) by QUARTER([Visited At]) (discrete)
-- chart: bar chart
-- keys: 1
-- why: an extracted quarter 1..4 as key
-- expect: answered
SELECT CAST(EXTRACT(QUARTER FROM "visits"."visited_at") AS INTEGER) AS "qr:visited_at:ok", AVG(CAST("visits"."days" AS DOUBLE PRECISION)) AS "avg:days:ok" FROM "public"."visits" "visits" GROUP BY 1
