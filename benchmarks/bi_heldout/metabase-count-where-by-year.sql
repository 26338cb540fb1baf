-- tool: Metabase, query builder: Count where Department is oncology, by Visited At: Year
-- chart: line chart
-- keys: 1
-- why: Metabase's CountIf: SUM(CASE … THEN 1 ELSE 0.0 END)
-- expect: answered
SELECT DATE_TRUNC('year', "public"."visits"."visited_at") AS "visited_at", SUM(CASE WHEN "public"."visits"."department" = 'oncology' THEN 1 ELSE 0.0 END) AS "count-where" FROM "public"."visits" GROUP BY DATE_TRUNC('year', "public"."visits"."visited_at") ORDER BY DATE_TRUNC('year', "public"."visits"."visited_at") ASC
