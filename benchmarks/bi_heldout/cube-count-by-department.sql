-- tool: Cube, /load: measures visits.count, dimensions visits.department
-- chart: bar chart
-- keys: 1
-- why: Cube's aliasing without AS and GROUP BY 1 ORDER BY 2
-- expect: answered
SELECT
      "visits".department "visits__department", count("visits".visit_id) "visits__count"
    FROM
      public.visits AS "visits"  GROUP BY 1 ORDER BY 2 DESC LIMIT 10000
