-- tool: dbplyr, group_by(department) |> summarise(patients = n_distinct(person_id), total = sum(cost))
-- chart: data frame
-- keys: 1
-- why: n_distinct of the unit and a SUM in one statement
-- expect: answered
SELECT "department", COUNT(DISTINCT "person_id") AS "patients", SUM("cost") AS "total"
FROM "visits"
GROUP BY "department"
