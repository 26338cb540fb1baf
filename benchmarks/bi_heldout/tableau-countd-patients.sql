-- tool: Tableau, COUNTD([Person Id]) by Department
-- chart: bar chart
-- keys: 1
-- why: COUNTD of the privacy unit per department
-- expect: answered
SELECT "visits"."department" AS "department", COUNT(DISTINCT "visits"."person_id") AS "ctd:person_id:ok" FROM "public"."visits" "visits" GROUP BY 1
