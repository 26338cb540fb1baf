-- tool: Metabase, query builder: Share of rows where Days > 3, by Department
-- chart: bar chart
-- keys: 1
-- why: Metabase's Share: a conditional SUM over a NULLIF'd COUNT
-- expect: answered
SELECT "public"."visits"."department" AS "department", CAST(SUM(CASE WHEN "public"."visits"."days" > 3 THEN 1 ELSE 0.0 END) AS DOUBLE PRECISION) / NULLIF(COUNT(*), 0) AS "share" FROM "public"."visits" GROUP BY "public"."visits"."department" ORDER BY "public"."visits"."department" ASC
