-- tool: Tableau, MEDIAN([Income]) by an Age group (Under 40 / Other)
-- chart: bar chart
-- keys: 1
-- why: a Tableau group as a CASE key, the median as PERCENTILE_CONT
-- expect: answered
SELECT (CASE WHEN ("people"."age" < 40) THEN 'Under 40' ELSE 'Other' END) AS "Age (group)", PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY CAST("people"."income" AS DOUBLE PRECISION)) AS "med:income:ok" FROM "public"."people" "people" GROUP BY 1
