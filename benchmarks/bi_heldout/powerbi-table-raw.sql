-- tool: Power BI, DirectQuery: table visual with person_id and income (Don't summarize)
-- chart: table (raw)
-- why: per-person values: must be refused
-- expect: refused 42501
select "_"."person_id", "_"."income"
from "public"."people" "_"
limit 1000001
