// date-fns: formatting, arithmetic and parsing of dates in a step.
import { addBusinessDays, differenceInCalendarDays, format, formatDistanceStrict, formatISO, isValid, parseISO, startOfISOWeek } from "date-fns";

export default async function handler(input: { at: string }) {
  const at = parseISO(input.at);
  return {
    valid: isValid(at) && !isValid(parseISO("not a date")),
    formatted: format(at, "EEEE, MMMM do yyyy 'at' HH:mm"),
    plus: formatISO(addBusinessDays(at, 3), { representation: "date" }),
    days: differenceInCalendarDays(parseISO("2024-03-01T00:00:00Z"), at),
    week: formatISO(startOfISOWeek(at), { representation: "date" }),
    distance: formatDistanceStrict(at, parseISO("2024-01-02T17:04:05Z")),
  };
}
