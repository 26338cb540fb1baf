-- tool: Tableau, SUM([Cost]) by MONTH([Visited At]) (continuous)
-- chart: line chart
-- keys: 1
-- why: DATE_TRUNC over a cast to TIMESTAMP WITHOUT TIME ZONE
-- expect: answered
SELECT DATE_TRUNC( 'MONTH', CAST("visits"."visited_at" AS TIMESTAMP WITHOUT TIME ZONE) ) AS "tmn:visited_at:ok", SUM("visits"."cost") AS "sum:cost:ok" FROM "public"."visits" "visits" GROUP BY 1
