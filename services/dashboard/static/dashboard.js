// rocketmesh dashboard: the little the pages need beyond HTML.
// A form with data-confirm asks before it is sent (delete a topic, reset offsets, resend dead letters).
document.addEventListener("submit", (event) => {
  const form = event.target;
  const question = form.getAttribute("data-confirm");
  if (question && !window.confirm(question)) {
    event.preventDefault();
  }
});
