/**
 * Serialized restarts (after ruff-vscode): one restart runs at a time; requests that arrive while
 * it runs collapse into at most one more restart, which starts when the current one has finished.
 * Every caller's promise settles when a restart that began after its request has finished.
 */
export class SerialRestarter {
  private running: Promise<void> | undefined;
  private queued: { promise: Promise<void>; reasons: string[] } | undefined;

  constructor(private readonly restart: (reasons: readonly string[]) => Promise<void>) {}

  /** Requests a restart; resolves when a restart covering this request has completed. */
  request(reason: string): Promise<void> {
    if (!this.running) {
      this.running = this.run([reason]);
      return this.running;
    }
    if (this.queued) {
      this.queued.reasons.push(reason);
      return this.queued.promise;
    }
    const reasons = [reason];
    const current = this.running;
    const promise = current
      .catch(() => undefined)
      .then(() => {
        this.queued = undefined;
        this.running = this.run(reasons);
        return this.running;
      });
    this.queued = { promise, reasons };
    return promise;
  }

  get busy(): boolean {
    return this.running !== undefined;
  }

  private async run(reasons: readonly string[]): Promise<void> {
    try {
      await this.restart(reasons);
    } finally {
      if (!this.queued) this.running = undefined;
    }
  }
}
