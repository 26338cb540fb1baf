-- tool: Tableau-style SQL: a bar chart of visits by department with a Top 3 filter on the
--   count; Tableau joins the query with its top-N subquery ON … IS NOT DISTINCT FROM …
-- source: issue 33 ("Top-N joins written with IS NOT DISTINCT FROM (Tableau)")
-- identifiers: the demo's visits.department (declared keys: no NULL group)
-- expect: answered
SELECT "visits"."department" AS "department", COUNT(1) AS "cnt:visits:ok" FROM "public"."visits" "visits" INNER JOIN ( SELECT "visits"."department" AS "department", COUNT(1) AS "$__alias__0" FROM "public"."visits" "visits" GROUP BY 1 ORDER BY 2 DESC LIMIT 3 ) "t0" ON ("visits"."department" IS NOT DISTINCT FROM "t0"."department") GROUP BY 1
