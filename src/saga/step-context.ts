import type { BusinessCalendar } from '../calendars/business-calendar.js';
import { COLUMN_LIMITS } from '../entities/dispatch-states.js';
import { SagaError, type SagaErrorDetails, SagaValidationError } from '../errors.js';
import { dueAtProblem } from '../time/due-date-range.js';
import { type Duration, toMilliseconds } from '../time/duration.js';
import { TIMER_SCOPES, TimerPlan, type TimerScope } from '../timers/timer-plan.js';
import { callOptions, headerRecord } from './call-options.js';
import { checkMessageWithHeaders, toJsonPayload } from './json-payload.js';
import { messageTypeOf } from './message-type-of.js';
import type { AnyMessage, SagaMessage } from './saga-message.js';
import { labelOf, nameProblem } from './stored-text.js';

/** Options of {@link StepContext.schedule}. */
export interface ScheduleOptions {
  /** Key of a calendar registered on the runtime: the delay counts business time only. Default: none. */
  readonly calendar?: string;
  /**
   * `'step'`: cancelled when the saga moves to another step (the default when the definition has a
   * `stepProperty`); `'saga'`: lives until it fires, is cancelled or the saga completes.
   */
  readonly scope?: TimerScope;
}

/** Options of {@link StepContext.send}. */
export interface SendOptions {
  /**
   * Extra headers for the publisher, next to the correlation id, saga type and saga id (which win over an extra
   * header of the same name): a plain object whose values are strings. Default: none (`undefined`); `null`, a
   * string, an array, a Map or a class instance is refused (`PAYLOAD_NOT_SERIALIZABLE`).
   */
  readonly headers?: Readonly<Record<string, string>>;
}

/** The timer that delivered the current message, when a timer did. */
export interface FiringTimer {
  readonly id: string;
  readonly name: string;
  readonly dueAt: Date;
  /** Failed deliveries before this one. */
  readonly attempts: number;
}

/** A message a step sent, validated. */
export interface OutgoingMessage {
  readonly messageType: string;
  readonly payloadJson: string;
  readonly headers: Record<string, string>;
}

/** What a step can do besides changing its state. */
export interface StepContext<TIn extends SagaMessage = SagaMessage, TOut extends SagaMessage = AnyMessage> {
  /** The saga type (definition name). */
  readonly sagaType: string;
  /** The instance id. */
  readonly sagaId: string;
  /** True when this message created the instance; false for a start message redelivered to an existing one. */
  readonly isNew: boolean;
  /** The runtime clock's time when the unit of work began. */
  readonly now: Date;
  /** The correlation id this message is handled under; stamped on timers and outbox headers. */
  readonly correlationId: string;
  /** The timer that delivered this message, or undefined for a message from outside. */
  readonly timer: FiringTimer | undefined;
  /**
   * Whether the saga is completed at this point of the step: true when it was completed before the step
   * (a message the definition handles after completion) or `complete()` was called, false after `reopen()`.
   */
  readonly completed: boolean;
  /**
   * Schedules the timer `name` to deliver `message` to this instance after `when` (a {@link Duration}) or
   * at `when` (a Date). A pending timer of the same name is replaced (new due time, new token).
   * @throws SagaValidationError for an empty or over-long name, an invalid delay or date, an unknown
   *   calendar, a message type the saga has no step for, or a payload that does not round-trip JSON;
   *   `OPTION_INVALID` for options that are not an object (`null`; leave them out instead) or a scope other
   *   than `'step'`/`'saga'`; `SAGA_COMPLETED` when the saga was completed before this step and the step has
   *   not called `reopen()`.
   */
  schedule(name: string, when: Duration | Date, message: TIn, options?: ScheduleOptions): void;
  /**
   * Cancels the pending timer `name`, if any.
   * @throws SagaValidationError `TIMER_NAME_INVALID` for a name `schedule()` refuses (not a string, empty,
   *   blank, over 200 characters, U+0000, a lone surrogate): one name per call.
   */
  cancel(name: string): void;
  /** Cancels every pending timer of this instance, and the ones scheduled earlier in this step. */
  cancelAll(): void;
  /**
   * Writes `message` to the outbox, committed with the state change and relayed at least once.
   * @throws SagaValidationError `MESSAGE_TYPE_MISSING`, `PAYLOAD_NOT_SERIALIZABLE` (the message, or headers that
   *   are not a plain object of strings), `PAYLOAD_TOO_LARGE`; `OPTION_INVALID` for options that are not an
   *   object (`null`; leave them out instead).
   */
  send(message: TOut, options?: SendOptions): void;
  /**
   * Completes the saga (soft: the row stays). Every pending timer is removed, and the timers this step
   * scheduled are discarded, in the same unit of work.
   */
  complete(): void;
  /**
   * Reopens a completed saga: `completed_at` is cleared in this unit of work (the version is bumped), so the
   * saga is active again and timers scheduled after this call are kept (e.g. a refund deadline after a
   * cancellation). Only messages the definition handles after completion (`handleCompleted`) reach a completed
   * saga. No effect on an active saga; a later `complete()` in the same step completes it again.
   */
  reopen(): void;
}

/** The facts of one unit of work a step context exposes; `completed` says whether the saga was completed before the step. */
export type StepContextFacts = Pick<StepContext, 'sagaType' | 'sagaId' | 'isNew' | 'now' | 'correlationId' | 'timer' | 'completed'>;

/** Settings the runtime resolves once and hands to every context. */
export interface StepContextSettings {
  readonly calendars: ReadonlyMap<string, BusinessCalendar>;
  readonly maxPayloadBytes: number;
  readonly knownMessageTypes: ReadonlySet<string>;
  readonly stepScopedByDefault: boolean;
}

/** The runtime's implementation of {@link StepContext}; it records, the runtime writes. */
export class RecordingStepContext implements StepContext<SagaMessage, SagaMessage> {
  readonly timers = new TimerPlan();
  readonly outgoing: OutgoingMessage[] = [];
  readonly sagaType: string;
  readonly sagaId: string;
  readonly isNew: boolean;
  readonly now: Date;
  readonly correlationId: string;
  readonly timer: FiringTimer | undefined;
  private readonly completedBefore: boolean;
  private isCompleted: boolean;
  private closed = false;

  constructor(
    facts: StepContextFacts,
    private readonly settings: StepContextSettings,
  ) {
    this.sagaType = facts.sagaType;
    this.sagaId = facts.sagaId;
    this.isNew = facts.isNew;
    this.now = facts.now;
    this.correlationId = facts.correlationId;
    this.timer = facts.timer;
    this.completedBefore = facts.completed;
    this.isCompleted = facts.completed;
  }

  get completed(): boolean {
    return this.isCompleted;
  }

  schedule(name: string, when: Duration | Date, message: SagaMessage, scheduleOptions?: ScheduleOptions): void {
    this.assertOpen();
    this.assertTimerName(name);
    const details = this.details({ timerName: name });
    const options = callOptions(scheduleOptions, `The options of timer '${name}'`, details);
    if (this.completedBefore && this.isCompleted) {
      // Discarding it silently would lose a deadline (the article's refund after a cancellation).
      throw new SagaValidationError(
        'SAGA_COMPLETED',
        `Timer '${name}' was scheduled by a step of saga ${this.sagaType}/${this.sagaId}, which is completed: a completed saga keeps no timers. Call ctx.reopen() before ctx.schedule() to make the saga active again, or do not schedule here.`,
        details,
      );
    }
    const messageType = messageTypeOf(message, `Timer '${name}' of saga ${this.sagaType}/${this.sagaId}`, details);
    if (!this.settings.knownMessageTypes.has(messageType)) {
      throw new SagaValidationError(
        'MESSAGE_TYPE_UNKNOWN',
        `Timer '${name}' of saga ${this.sagaType} would deliver '${messageType}', which the saga has no step for: add steps.${messageType} or schedule a message type it handles.`,
        { ...details, messageType },
      );
    }
    const calendar = this.calendarOf(name, options.calendar, details);
    const dueAt = this.dueAtOf(name, when, calendar, options.calendar, details);
    const payloadJson = toJsonPayload(message, `the message of timer '${name}'`, this.settings.maxPayloadBytes, details);
    const scope = options.scope === undefined ? this.defaultScope() : options.scope;
    if (scope !== TIMER_SCOPES.STEP && scope !== TIMER_SCOPES.SAGA) {
      throw new SagaValidationError('OPTION_INVALID', `Timer '${name}': scope must be 'step' or 'saga'.`, details);
    }
    this.timers.schedule({ name, dueAt, messageType, payloadJson, calendarKey: options.calendar ?? null, scope });
  }

  cancel(name: string): void {
    this.assertOpen();
    this.assertTimerName(name);
    this.timers.cancel(name);
  }

  cancelAll(): void {
    this.assertOpen();
    this.timers.cancelAll();
  }

  send(message: SagaMessage, sendOptions?: SendOptions): void {
    this.assertOpen();
    const details = this.details();
    const messageType = messageTypeOf(message, `A message sent by saga ${this.sagaType}/${this.sagaId}`, details);
    const what = `the '${messageType}' message`;
    const options = callOptions(sendOptions, `The options of ${what}`, { ...details, messageType });
    const payloadJson = toJsonPayload(message, what, this.settings.maxPayloadBytes, { ...details, messageType });
    const extra = headerRecord(options.headers, what, { ...details, messageType });
    const headers = { ...extra, 'correlation-id': this.correlationId, 'saga-type': this.sagaType, 'saga-id': this.sagaId };
    // Headers are stored next to the payload: together they stay within maxPayloadBytes.
    const headersJson = toJsonPayload(headers, `the headers of ${what}`, this.settings.maxPayloadBytes, { ...details, messageType });
    checkMessageWithHeaders(payloadJson, headersJson, what, this.settings.maxPayloadBytes, { ...details, messageType });
    this.outgoing.push({ messageType, payloadJson, headers });
  }

  complete(): void {
    this.assertOpen();
    this.isCompleted = true;
  }

  reopen(): void {
    this.assertOpen();
    this.isCompleted = false;
  }

  /** Ends the context: the step has returned, later calls are refused. */
  close(): void {
    this.closed = true;
  }

  private calendarOf(name: string, key: string | undefined, details: SagaErrorDetails): BusinessCalendar | undefined {
    if (key === undefined) return undefined;
    const calendar = typeof key === 'string' ? this.settings.calendars.get(key) : undefined;
    if (!calendar) {
      const known = [...this.settings.calendars.keys()];
      throw new SagaValidationError(
        'CALENDAR_UNKNOWN',
        `Timer '${name}' of saga ${this.sagaType} names calendar ${labelOf(key)}, which is not registered: register it in the runtime's 'calendars' option${known.length ? ` (registered: ${known.join(', ')})` : ' (none are registered)'}.`,
        { ...details, calendarKey: labelOf(key) },
      );
    }
    return calendar;
  }

  /** The due date of a timer, within the range both databases store, and never before its start. */
  private dueAtOf(
    name: string,
    when: Duration | Date,
    calendar: BusinessCalendar | undefined,
    key: string | undefined,
    details: SagaErrorDetails,
  ): Date {
    const invalid = (problem: string, fix: string) =>
      new SagaValidationError('TIMER_DUE_INVALID', `Timer '${name}' of saga ${this.sagaType}: its due date ${problem}: ${fix}.`, details);
    const range = 'keep due dates from 1970-01-01 to 9999-12-31 (UTC)';
    const start = when instanceof Date ? when.getTime() : this.now.getTime();
    if (when instanceof Date) {
      const problem = dueAtProblem(start);
      if (problem) throw invalid(problem, `pass a valid Date; ${range}`);
    }
    const ms = when instanceof Date ? 0 : this.withDetails(() => toMilliseconds(when, `delay of timer '${name}'`), details);
    if (!calendar) {
      const problem = dueAtProblem(start + ms);
      if (problem) throw invalid(problem, `shorten the delay; ${range}`);
      return new Date(start + ms);
    }
    // A calendar is application code: what it returns is checked like any other input (copies in, so it
    // cannot change the step's clock).
    const due = this.withDetails(
      () => (when instanceof Date ? calendar.nextOpen(new Date(start)) : calendar.addDuration(new Date(start), ms)),
      details,
    ) as unknown;
    const dueMs = due instanceof Date ? due.getTime() : Number.NaN;
    const problem = dueAtProblem(dueMs) ?? (dueMs < start ? 'is before the instant it was computed from' : undefined);
    if (problem) throw invalid(`(from calendar ${labelOf(key)}) ${problem}`, `fix the calendar or shorten the delay; ${range}`);
    return new Date(dueMs);
  }

  /** A timer name `schedule()` and `cancel()` take: one a `saga_timer.name` stores as given. */
  private assertTimerName(name: unknown): void {
    const nameIssue = nameProblem(name, { maxLength: COLUMN_LIMITS.timerName, notBlank: true });
    if (nameIssue) {
      throw new SagaValidationError(
        'TIMER_NAME_INVALID',
        `A timer name of saga ${this.sagaType}/${this.sagaId} ${nameIssue}: use 1 to ${COLUMN_LIMITS.timerName} characters, not only spaces, without U+0000 or lone surrogates.`,
        this.details(),
      );
    }
  }

  private defaultScope(): TimerScope {
    return this.settings.stepScopedByDefault ? TIMER_SCOPES.STEP : TIMER_SCOPES.SAGA;
  }

  private assertOpen(): void {
    if (this.closed) {
      throw new SagaError(
        'CONTEXT_CLOSED',
        `The step context of saga ${this.sagaType}/${this.sagaId} was used after its step returned: await every call inside the step.`,
        this.details(),
      );
    }
  }

  private details(extra: SagaErrorDetails = {}): SagaErrorDetails {
    return { sagaType: this.sagaType, sagaId: this.sagaId, ...extra };
  }

  private withDetails<T>(fn: () => T, details: SagaErrorDetails): T {
    try {
      return fn();
    } catch (error) {
      if (error instanceof SagaValidationError) {
        throw new SagaValidationError(error.code, error.message, { ...details, ...error.details });
      }
      throw error;
    }
  }
}
