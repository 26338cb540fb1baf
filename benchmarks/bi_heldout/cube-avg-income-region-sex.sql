-- tool: Cube, /load: people.avg_income by region and sex
-- chart: table
-- keys: 1,2
-- why: AVG over two keys ordered by the measure
-- expect: answered
SELECT
      "people".region "people__region", "people".sex "people__sex", avg("people".income) "people__avg_income"
    FROM
      public.people AS "people"  GROUP BY 1, 2 ORDER BY 3 DESC LIMIT 10000
