-- tool: Cube, /load: a count measure with a filter (days > 7) by department
-- chart: bar chart
-- keys: 1
-- why: COUNT(CASE WHEN … THEN id END)
-- expect: answered
SELECT
      "visits".department "visits__department", count(CASE WHEN ("visits".days > 7) THEN "visits".visit_id END) "visits__long_stays"
    FROM
      public.visits AS "visits"  GROUP BY 1 ORDER BY 2 DESC LIMIT 10000
