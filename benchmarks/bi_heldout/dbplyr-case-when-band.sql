-- tool: dbplyr, mutate(age_band = case_when(...)) |> group_by(age_band) |> summarise(n = n(), income = mean(income))
-- chart: data frame
-- keys: 1
-- why: a case_when key computed in a q01 subquery
-- expect: answered
SELECT "age_band", COUNT(*) AS "n", AVG("income") AS "income"
FROM (
  SELECT
    "people".*,
    CASE
WHEN ("age" < 30.0) THEN '18-29'
WHEN ("age" < 50.0) THEN '30-49'
WHEN ("age" >= 50.0) THEN '50+'
END AS "age_band"
  FROM "people"
) AS "q01"
GROUP BY "age_band"
