-- tool: Metabase, query builder: Median of Income by Sex
-- chart: bar chart
-- keys: 1
-- why: Median compiled to PERCENTILE_CONT(0.5) WITHIN GROUP
-- expect: answered
SELECT "public"."people"."sex" AS "sex", PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY "public"."people"."income") AS "median" FROM "public"."people" GROUP BY "public"."people"."sex" ORDER BY "public"."people"."sex" ASC
