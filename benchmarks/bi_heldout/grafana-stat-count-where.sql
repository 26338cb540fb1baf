-- tool: Grafana, stat panel: women of working age
-- chart: stat
-- why: a COUNT with a conjunction of predicates
-- expect: answered
SELECT
  count(*)
FROM people
WHERE sex = 'f' AND age BETWEEN 18 AND 65
