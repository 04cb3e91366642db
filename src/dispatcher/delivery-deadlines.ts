import { type Clock, ENDED } from '../time/clock.js';

/** Marks a delivery that ran past `deliveryTimeoutMs`. */
export class DeliveryTimeout extends Error {
  override readonly name = 'DeliveryTimeout';
}

interface Deadline {
  readonly at: number;
  readonly expire: (error: DeliveryTimeout) => void;
  settled: boolean;
}

/** Settled deadlines kept before the queue is compacted (a hung delivery at its head keeps later ones). */
const COMPACT_AFTER = 1_024;

/**
 * One timeout mechanism for every delivery in flight: a single sleep on the dispatcher's clock until the
 * earliest open deadline, instead of a timer and an AbortController per delivery. Deliveries start in time
 * order and share one timeout, so their deadlines are queued in order and the head is the earliest.
 */
export class DeliveryDeadlines {
  private readonly queue: Deadline[] = [];
  private open = 0;
  private settledInQueue = 0;
  private watchdog: AbortController | undefined;

  /**
   * @param clock the dispatcher's clock.
   * @param timeoutMs how long a delivery may run, in milliseconds of `clock`.
   */
  constructor(
    private readonly clock: Clock,
    private readonly timeoutMs: number,
  ) {}

  /** Settles as `work` does, or fails with DeliveryTimeout once `work` ran for `timeoutMs`. */
  race<T>(work: PromiseLike<T> | T): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const deadline: Deadline = { at: this.clock.now().getTime() + this.timeoutMs, expire: reject, settled: false };
      this.queue.push(deadline);
      this.open++;
      this.arm();
      // A publisher typed loosely may return a plain value: treat it as settled. Once expired, the deadline's
      // rejection has settled this promise and the late outcome is dropped.
      Promise.resolve(work).then(
        (value) => {
          this.settle(deadline);
          resolve(value);
        },
        (error: unknown) => {
          this.settle(deadline);
          reject(error);
        },
      );
    });
  }

  private settle(deadline: Deadline): void {
    if (deadline.settled) return;
    deadline.settled = true;
    this.settledInQueue++;
    if (--this.open === 0) {
      this.watchdog?.abort(ENDED);
      this.watchdog = undefined;
      this.queue.length = 0;
      this.settledInQueue = 0;
      return;
    }
    this.dropSettledHead();
    if (this.settledInQueue > COMPACT_AFTER && this.settledInQueue * 2 > this.queue.length) {
      const open = this.queue.filter((d) => !d.settled);
      this.queue.splice(0, this.queue.length, ...open);
      this.settledInQueue = 0;
    }
  }

  private dropSettledHead(): void {
    while (this.queue[0]?.settled) {
      this.queue.shift();
      this.settledInQueue--;
    }
  }

  /** Unless the watchdog sleeps: sleeps until the head's deadline, then expires what is due and sleeps again. */
  private arm(): void {
    if (this.watchdog) return;
    this.dropSettledHead();
    const head = this.queue[0];
    if (!head) return;
    const watchdog = new AbortController();
    this.watchdog = watchdog;
    void this.clock.sleep(head.at - this.clock.now().getTime(), watchdog.signal).then(() => {
      if (watchdog.signal.aborted) return;
      this.watchdog = undefined;
      this.expireDue();
      this.arm();
    });
  }

  private expireDue(): void {
    const now = this.clock.now().getTime();
    this.dropSettledHead();
    for (let head = this.queue[0]; head && head.at <= now; head = this.queue[0]) {
      this.queue.shift();
      this.open--;
      head.settled = true;
      head.expire(new DeliveryTimeout(`still running after ${this.timeoutMs} ms (deliveryTimeoutMs)`));
      this.dropSettledHead();
    }
  }
}
