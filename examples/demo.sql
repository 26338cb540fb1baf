-- A tour of the SQL idp-proxy answers, on the embedded demo.
-- Run: idp-proxy query --user bob -f examples/demo.sql
SET idp.epsilon = 0.05;

-- Counts over a range: discrete Laplace noise, sensitivity 1 (one row per person).
SELECT COUNT(*) FROM people WHERE age BETWEEN 30 AND 39;

-- A histogram over declared keys: every region is answered, empty or not.
SELECT region, COUNT(*) AS people FROM people GROUP BY region ORDER BY people DESC;

-- Median and a high percentile: noise from the gap to the neighbouring values.
SELECT MEDIAN(income) AS median_income,
       PERCENTILE_DISC(0.9) WITHIN GROUP (ORDER BY income) AS p90
FROM people WHERE region IN ('north', 'east');

-- User-level privacy: a person with many visits is protected as a whole, so the
-- noise covers all of one person's rows (here up to six).
SELECT department, COUNT(*) AS visits, MEDIAN(cost) AS median_cost
FROM visits GROUP BY department;

-- Aggregates over one row per person: how many people visited more than three
-- times (a person changes it by at most one), and the visits per visitor.
SELECT COUNT(*) AS frequent_visitors
FROM (SELECT person_id, COUNT(*) AS n FROM visits GROUP BY person_id) t WHERE n > 3;
SELECT AVG(n) AS visits_per_visitor
FROM (SELECT person_id, COUNT(*) AS n FROM visits GROUP BY person_id) t;

SHOW idp.budget;
