-- tool: Tableau, COUNT by Department with a filter keeping two departments
-- chart: bar chart
-- keys: 1
-- why: the WHERE keeps 2 of 5 public keys: the answer has 2 groups
-- expect: answered
SELECT "visits"."department" AS "department", COUNT(1) AS "cnt:visits:ok" FROM "public"."visits" "visits" WHERE ("visits"."department" IN ('cardiology', 'oncology')) GROUP BY 1
