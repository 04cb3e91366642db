import { type SagaErrorDetails, SagaValidationError } from '../../errors.js';
import { dueAtProblem } from '../../time/due-date-range.js';
import { toMilliseconds } from '../../time/duration.js';
import type { StagingTime } from './staging-options.js';

/** The range a staged row's time must fall in, for error messages. */
const RANGE = 'keep it from 1970-01-01 to 9999-12-31 (UTC)';

/**
 * When a staged row may be delivered: `now`, `now + delay`, or `notBefore`; validated as a timer's delay and due date
 * are.
 * @param what names the staged row in errors, e.g. "the 'OrderPlaced' message staged for saga order".
 * @throws SagaValidationError `OPTION_INVALID` for both `delay` and `notBefore`; `TIMER_DELAY_INVALID` for a delay that
 *   is not a finite, non-negative duration; `TIMER_DUE_INVALID` for a `notBefore` that is not a valid Date, or a time
 *   outside 1970 to 9999.
 */
export function availableAtOf(now: Date, time: StagingTime, what: string, details: SagaErrorDetails): Date {
  const { delay, notBefore } = time;
  if (delay !== undefined && notBefore !== undefined) {
    throw new SagaValidationError('OPTION_INVALID', `${what}: give delay or notBefore, not both.`, details);
  }
  const invalid = (problem: string, fix: string) =>
    new SagaValidationError('TIMER_DUE_INVALID', `The delivery time of ${what} ${problem}: ${fix}; ${RANGE}.`, details);
  if (notBefore !== undefined) {
    const ms = notBefore instanceof Date ? notBefore.getTime() : Number.NaN;
    const problem = notBefore instanceof Date ? dueAtProblem(ms) : 'is not a Date';
    if (problem) throw invalid(problem, 'pass a valid Date as notBefore');
    return new Date(ms);
  }
  if (delay === undefined) return now;
  let ms: number;
  try {
    ms = toMilliseconds(delay, `delay of ${what}`);
  } catch (error) {
    if (!(error instanceof SagaValidationError)) throw error;
    throw new SagaValidationError(error.code, error.message, { ...details, ...error.details });
  }
  const problem = dueAtProblem(now.getTime() + ms);
  if (problem) throw invalid(problem, 'shorten the delay');
  return new Date(now.getTime() + ms);
}
