"""How the admin's lists count, page and filter when a table holds millions of rows.

Every list page costs what its page costs, whatever the table's size:

- it counts at most :attr:`BoundedPaginator.limit` rows (``SELECT count(*)`` of a
  subquery with ``LIMIT limit + 1``), and shows "more than 10,000" past that;
- it shows the pages that hold those rows only; a page past them answers with a message
  that asks for a filter or a search, never with an ``OFFSET`` through the table;
- a filter whose choices are fixed (roles, triggers) lists them without a query; one whose
  choices are the values stored (agent ids) reads the first ones through the index, one
  probe per value (:func:`first_values`), never a ``SELECT DISTINCT`` over the table;
- the date drill-down links every period between the oldest and the newest row (one
  ``Min``/``Max``), never a ``SELECT DISTINCT date_trunc(...)`` over the table;
- no full count beside the filtered one (``show_full_result_count``) and no facet counts.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterator
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import reverse_field_path
from django.contrib.admin.views.main import ORDER_VAR, PAGE_VAR, ChangeList
from django.core.exceptions import EmptyResultSet
from django.core.paginator import Paginator
from django.db import connections
from django.db.models import Max, Min, Model, QuerySet
from django.db.models.expressions import RawSQL
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils import formats, timezone
from django.utils.functional import cached_property
from django.utils.text import capfirst
from django.utils.translation import gettext_lazy as _


class BoundedPaginator(Paginator):  # type: ignore[type-arg]
    """Counts at most :attr:`limit` rows: past it, :attr:`capped` is true and :attr:`count`
    is the limit (the rows the list shows, in ``limit / per_page`` pages)."""

    #: Rows a list counts, and shows, at most.
    limit = 10_000

    capped = False

    @cached_property
    def count(self) -> int:
        rows = self.object_list
        if not isinstance(rows, QuerySet):
            return super().count
        counted = rows.order_by()[: self.limit + 1].count()  # count(*) of a LIMITed subquery
        self.capped = counted > self.limit
        return min(counted, self.limit)


class BoundedChangeList(ChangeList):
    """A change list that says whether its count stopped at the limit, and links its
    dates without reading which ones hold rows."""

    @property
    def count_capped(self) -> bool:
        return bool(getattr(self.paginator, "capped", False))

    @property
    def count_limit(self) -> str:
        """The limit a count stopped at, as the admin writes numbers ("10,000")."""
        return _grouped(getattr(self.paginator, "limit", self.result_count))

    @cached_property
    def date_links(self) -> dict[str, Any]:
        return date_links(self)

    def get_ordering(self, request: HttpRequest, queryset: QuerySet[Any]) -> list[Any]:
        """Only the columns of ``sortable_by`` sort, whatever the URL asks (Django hides the
        other headers' links, but sorts by them when ``o=`` names them); without one, the
        list's own order."""
        if ORDER_VAR in self.params and self.sortable_by is not None:
            kept = [p for p in str(self.params[ORDER_VAR]).split(".") if self._sortable(p)]
            self.params.pop(ORDER_VAR)
            if kept:
                self.params[ORDER_VAR] = ".".join(kept)
        return super().get_ordering(request, queryset)

    def _sortable(self, part: str) -> bool:
        index = part.rpartition("-")[2]
        try:
            return self.list_display[int(index)] in (self.sortable_by or ())
        except (ValueError, IndexError):
            return False


class BoundedListAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """The counting, paging and filtering rules of the module, for any ``ModelAdmin``."""

    paginator = BoundedPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return BoundedChangeList

    def last_page(self) -> int:
        """The last page a list shows: the one that holds the paginator's last counted row."""
        limit = getattr(self.paginator, "limit", None)
        return math.ceil(limit / self.list_per_page) if limit else 0

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """A page past :meth:`last_page` is not read: the list's first page answers, with
        the filters and the search kept and a message that says how to reach the rows."""
        last = self.last_page()
        if last and _page_number(request) > last:
            self.message_user(request, _past_the_last_page(self, last), messages.WARNING)
            params = request.GET.copy()
            params.pop(PAGE_VAR, None)
            query = params.urlencode()
            return HttpResponseRedirect(f"{request.path}?{query}" if query else request.path)
        response = super().changelist_view(request, extra_context)
        context = getattr(response, "context_data", None) or {}
        cl = context.get("cl")
        if isinstance(cl, BoundedChangeList) and cl.count_capped:
            note = _("All of more than %(limit)s selected")
            context["selection_note_all"] = note % {"limit": cl.count_limit}
        return response


def _page_number(request: HttpRequest) -> int:
    try:
        return int(request.GET.get(PAGE_VAR, 1))
    except ValueError:
        return 1


def _grouped(number: int) -> str:
    return str(formats.number_format(number, force_grouping=True))


def _past_the_last_page(model_admin: BoundedListAdmin, last: int) -> str:
    limit = getattr(model_admin.paginator, "limit", 0)
    return str(
        _(
            "This list shows its first %(limit)s %(rows)s, in %(last)s pages. To reach the "
            "others, narrow it with a filter or a search, or sort it the other way."
        )
        % {
            "limit": _grouped(limit),
            "rows": model_admin.model._meta.verbose_name_plural,
            "last": last,
        }
    )


class FixedValuesFilter(admin.SimpleListFilter):
    """Filters a field by the values the app stores in it, listed without a query. A value
    outside them (an old row, another writer) still filters when given in the URL."""

    #: The field filtered, and its values with their labels.
    field: str
    values: dict[str, Any]

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return list(self.values.items())

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset if value is None else queryset.filter(**{self.field: value})


class FirstValuesFilter(admin.AllValuesFieldListFilter):
    """``list_filter`` by the values stored in a field: the first :attr:`limit` of them in
    order, read by :func:`first_values` (through the field's index), then a hint that the
    search finds the others. A value chosen by URL is listed even if it is not among them."""

    #: Values listed at most.
    limit = 100

    def __init__(
        self,
        field: Any,
        request: HttpRequest,
        params: dict[str, Any],
        model: type[Model],
        model_admin: Any,
        field_path: str,
    ) -> None:
        super().__init__(field, request, params, model, model_admin, field_path)
        parent, _path = reverse_field_path(model, field_path)
        rows = model_admin.get_queryset(request) if model == parent else parent._default_manager
        found = first_values(rows.all(), field.name, self.limit + 1)
        self.more = len(found) > self.limit
        shown = found[: self.limit]
        chosen = [v for v in self.lookup_val or [] if v not in {str(s) for s in shown}]
        self.lookup_choices = [*shown, *chosen]  # type: ignore[assignment]

    def choices(self, changelist: Any) -> Iterator[Any]:
        yield from super().choices(changelist)
        if self.more:
            yield {
                "selected": False,
                "query_string": changelist.get_query_string(),
                "display": _("… more (search for the others)"),
            }


def first_values(rows: QuerySet[Any], field: str, limit: int) -> list[Any]:
    """The first ``limit`` distinct non-null values of ``field`` among ``rows``, in order, by
    a loose index scan: a recursive query that asks for the next value above the last one
    found, each question one probe of the field's index (a ``SELECT DISTINCT`` would read
    every row, or every entry of the index). The statements are the ORM's own, so ``rows``'
    filters apply. MySQL refuses the recursive query (its recursive part names the CTE in a
    subquery), and reads a ``DISTINCT`` of an indexed column by such a scan itself."""
    ordered = rows.order_by(field).values_list(field, flat=True)
    db = connections[rows.db]
    if db.vendor == "mysql" and not getattr(db, "mysql_is_mariadb", False):
        return list(ordered.filter(**{f"{field}__isnull": False}).distinct()[:limit])
    first = ordered.filter(**{f"{field}__isnull": False})[:1]
    found = RawSQL("found.value", (), output_field=rows.model._meta.get_field(field))
    step = ordered.filter(**{f"{field}__gt": found})[:1]
    try:
        first_sql, first_params = first.query.get_compiler(using=rows.db).as_sql()
        step_sql, step_params = step.query.get_compiler(using=rows.db).as_sql()
    except EmptyResultSet:  # ``rows`` is ``none()``
        return []
    sql = (
        f"WITH RECURSIVE found(value, n) AS (SELECT ({first_sql}), 1 UNION ALL "
        f"SELECT ({step_sql}), found.n + 1 FROM found WHERE found.value IS NOT NULL "
        "AND found.n < %s) SELECT value FROM found WHERE value IS NOT NULL"
    )
    with db.cursor() as cursor:
        cursor.execute(sql, [*first_params, *step_params, limit])
        return [value for (value,) in cursor.fetchall()]


def date_links(cl: ChangeList) -> dict[str, Any]:
    """The context of ``admin/date_hierarchy.html`` for ``cl.date_hierarchy``: every year,
    month or day between the list's oldest and newest row (one ``Min``/``Max`` of the
    filtered list), where Django's drill-down lists only those that hold rows (a
    ``SELECT DISTINCT`` over them). A period without rows may be listed; it lists nothing."""
    field = str(cl.date_hierarchy)
    names = [f"{field}__{part}" for part in ("year", "month", "day")]
    year, month, day = (cl.params.get(name) for name in names)

    def link(*values: Any) -> str:
        return str(cl.get_query_string(dict(zip(names, values, strict=False)), [f"{field}__"]))

    if year and month and day:
        chosen = datetime.date(int(year), int(month), int(day))
        return _links(
            (link(year, month), _format(chosen, "YEAR_MONTH_FORMAT")),
            [{"title": _format(chosen, "MONTH_DAY_FORMAT")}],
        )
    first, last = _range(cl.queryset, field)
    if first is None or last is None:
        if year and month:
            return _links((link(year), str(year)), [])
        return _links((link(), _("All dates")) if year else None, [])
    if not (year or month) and first.year == last.year:
        year = first.year
        month = first.month if first.month == last.month else None
    if year and month:
        days = [first.replace(day=d) for d in range(first.day, last.day + 1)]
        back = (link(year), str(year))
        return _links(
            back, [_choice(link(year, month, d.day), d, "MONTH_DAY_FORMAT") for d in days]
        )
    if year:
        months = [first.replace(day=1, month=m) for m in range(first.month, last.month + 1)]
        return _links(
            (link(), _("All dates")),
            [_choice(link(year, m.month), m, "YEAR_MONTH_FORMAT") for m in months],
        )
    years = range(first.year, last.year + 1)
    return _links(None, [{"link": link(str(y)), "title": str(y)} for y in years])


def _range(rows: QuerySet[Any], field: str) -> tuple[Any, Any]:
    found = rows.aggregate(first=Min(field), last=Max(field))
    ends = [found["first"], found["last"]]
    return tuple(  # type: ignore[return-value]
        timezone.localtime(v) if isinstance(v, datetime.datetime) and timezone.is_aware(v) else v
        for v in ends
    )


def _format(value: datetime.date, fmt: str) -> str:
    return str(capfirst(formats.date_format(value, fmt)))


def _choice(link: str, value: datetime.date, fmt: str) -> dict[str, str]:
    return {"link": link, "title": _format(value, fmt)}


def _links(back: tuple[str, Any] | None, choices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "show": True,
        "back": {"link": back[0], "title": back[1]} if back else None,
        "choices": choices,
    }
