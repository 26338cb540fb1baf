-- tool: dbplyr, count(visits, department, sort = TRUE)
-- chart: data frame
-- keys: 1
-- why: dbplyr's quoting and ORDER BY the count
-- expect: answered
SELECT "department", COUNT(*) AS "n"
FROM "visits"
GROUP BY "department"
ORDER BY "n" DESC
