-- tool: Power BI, DirectQuery: bar chart with a slicer on two departments, Average of cost
-- chart: bar chart
-- keys: 1
-- why: an IN filter on public keys inside the source subquery
-- expect: answered
select "_"."department", "_"."a0"
from 
(
    select "rows"."department" as "department",
        avg("rows"."cost") as "a0"
    from 
    (
        select "_"."department", "_"."cost"
        from "public"."visits" "_"
        where "_"."department" in ('oncology', 'pediatrics')
    ) "rows"
    group by "department"
) "_"
where not "_"."a0" is null
limit 1000001
