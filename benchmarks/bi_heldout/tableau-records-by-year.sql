-- tool: Tableau, SUM([Number of Records]) by YEAR([Visited At])
-- chart: line chart (discrete year)
-- keys: 1
-- why: Number of Records as SUM(1), the year as CAST(EXTRACT(YEAR …) AS INTEGER)
-- expect: answered
SELECT CAST(EXTRACT(YEAR FROM "visits"."visited_at") AS INTEGER) AS "yr:visited_at:ok", SUM(1) AS "sum:Number of Records:ok" FROM "public"."visits" "visits" GROUP BY 1
