-- tool: dbplyr, group_by(sex) |> summarise(sd_age = sd(age), n = n())
-- chart: data frame
-- keys: 1
-- why: sd() as STDDEV_SAMP
-- expect: answered
SELECT "sex", STDDEV_SAMP("age") AS "sd_age", COUNT(*) AS "n"
FROM "people"
GROUP BY "sex"
