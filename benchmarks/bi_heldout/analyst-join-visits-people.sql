-- tool: analyst, psql
-- chart: join
-- keys: 1
-- why: visits joined to people on the unit, filtered on the person
-- expect: answered
SELECT p.sex, AVG(v.cost) AS avg_cost FROM visits v JOIN people p ON p.person_id = v.person_id WHERE p.age >= 65 GROUP BY p.sex
