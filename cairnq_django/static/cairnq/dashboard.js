/* The queue dashboard, live: every few seconds fetch the page's live region
   (?fragment=queues) and swap it in, without a reload. Without JavaScript the
   page is the same, reloaded by hand. A refresh waits while the operator types
   in a card's form, while the tab is hidden, and stops when the answer is not
   the fragment (a login page after the session ended). The bulk-operation
   page uses it too (data-cairnq-fragment="progress"); its region says
   data-cairnq-final once the operation has ended, and refreshing stops. */
(function () {
  "use strict";
  var live = document.getElementById("cairnq-live");
  if (!live || !window.fetch) {
    return;
  }
  var every = parseInt(live.getAttribute("data-cairnq-refresh-ms"), 10) || 5000;
  var url = live.getAttribute("data-cairnq-fragment-url");
  var fragment = live.getAttribute("data-cairnq-fragment") || "queues";

  function ended() {
    return live.querySelector("[data-cairnq-final]") !== null;
  }
  var inFlight = false;

  function editing() {
    var active = document.activeElement;
    if (active && live.contains(active) && /^(INPUT|TEXTAREA|SELECT|BUTTON)$/.test(active.tagName)) {
      return true;
    }
    var fields = live.querySelectorAll("input[type=text], textarea");
    for (var i = 0; i < fields.length; i += 1) {
      if (fields[i].value) {
        return true;
      }
    }
    return false;
  }

  function schedule() {
    window.setTimeout(refresh, every);
  }

  function refresh() {
    if (inFlight || document.hidden || editing()) {
      schedule();
      return;
    }
    inFlight = true;
    window.fetch(url, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (!response.ok || response.headers.get("X-Cairnq-Fragment") !== fragment) {
          throw new Error("not the dashboard fragment: " + response.status);
        }
        return response.text();
      })
      .then(function (html) {
        live.innerHTML = html;
        live.classList.remove("cairnq-stale");
        live.setAttribute("data-cairnq-refreshed", String(Date.now()));
        inFlight = false;
        if (!ended()) {
          schedule();
        }
      })
      .catch(function () {
        // Keep the last figures, marked as stale; try again at the next turn.
        live.classList.add("cairnq-stale");
        inFlight = false;
        schedule();
      });
  }

  live.classList.add("cairnq-live-on");
  if (!ended()) {
    schedule();
  }
})();
