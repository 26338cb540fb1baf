-- tool: Apache Superset 6.1.0, SQL Lab: a dataset's "select star" preview as Superset writes it
--   (the dataset's select_star)
-- expect: refused 42501
SELECT
  *
FROM public.people
LIMIT 100
